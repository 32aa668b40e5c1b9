// `check`'s wiring rules for pods with lastcall (nothing captures traffic): a Service that reaches
// an app port directly bypasses it, and a declared app port no inbound listener forwards to cannot
// go through it. The config is read from the mounted ConfigMap when the manifest has it.
import { parse } from "yaml";
import { containerName, type ContainerSpec, flagValue, podContainers } from "./containers.ts";
import { declaredAppPorts, readWires, type SeenConfig } from "./envoy-wiring.ts";
import { lastcallArgs } from "./proxy-lastcall.ts";
import { bypasses, selects, type ServiceObject, serviceOf } from "./services.ts";
import { getPath, isRecord, type PodTemplate } from "./workloads.ts";

/** What the rest of a manifest tells about a pod: its Services and ConfigMaps. */
export interface ManifestContext {
  services: ServiceObject[];
  /** ConfigMaps by `namespace/name` (namespace empty when unset). */
  configMaps: Map<string, Record<string, unknown>>;
}

/**
 * The Services and ConfigMaps among a manifest's objects.
 *
 * @example
 * ```ts
 * manifestContext(objects).services.map((s) => s.ref); // ["service/web"]
 * ```
 */
export function manifestContext(objects: readonly unknown[]): ManifestContext {
  const context: ManifestContext = { services: [], configMaps: new Map() };
  for (const object of objects) {
    const service = serviceOf(object);
    if (service) context.services.push(service);
    const name = getPath(object, ["metadata", "name"]);
    if (isRecord(object) && object.kind === "ConfigMap" && typeof name === "string") {
      context.configMaps.set(
        configMapKey(getPath(object, ["metadata", "namespace"]), name),
        object,
      );
    }
  }
  return context;
}

/**
 * How ConfigMaps are looked up: `namespace/name`.
 *
 * @example
 * ```ts
 * configMapKey(undefined, "web-lastcall-envoy"); // "/web-lastcall-envoy"
 * ```
 */
export function configMapKey(namespace: unknown, name: string): string {
  return `${typeof namespace === "string" ? namespace : ""}/${name}`;
}

/**
 * Where a `lastcall run` container's Envoy config comes from: a ConfigMap and key, or not one.
 *
 * @example
 * ```ts
 * configSource(spec, sidecar); // { configMap: "web-lastcall-envoy", key: "envoy.yaml" }
 * ```
 */
export function configSource(
  spec: Record<string, unknown>,
  c: ContainerSpec,
): { configMap: string; key: string } | undefined {
  const args = lastcallArgs(c) ?? [];
  const path = flagValue(args, "--config") ?? "/etc/envoy/envoy.yaml";
  const cut = path.lastIndexOf("/");
  const dir = path.slice(0, cut).replace(/\/+$/, "");
  const file = path.slice(cut + 1);
  const mounts = Array.isArray(c.volumeMounts) ? c.volumeMounts.filter(isRecord) : [];
  const mount = mounts.find((m) => String(m.mountPath).replace(/\/+$/, "") === dir);
  const volumes = Array.isArray(spec.volumes) ? spec.volumes.filter(isRecord) : [];
  const volume = volumes.find((v) => v.name === mount?.name);
  const configMap = isRecord(volume?.configMap) ? volume.configMap : undefined;
  if (!configMap || typeof configMap.name !== "string") return undefined;
  const item = (Array.isArray(configMap.items) ? configMap.items.filter(isRecord) : []).find((i) =>
    i.path === file
  );
  return { configMap: configMap.name, key: typeof item?.key === "string" ? item.key : file };
}

/**
 * The config a ConfigMap of the manifest holds for that source; undefined when not in it.
 *
 * @example
 * ```ts
 * seenConfig(context, undefined, { configMap: "web-lastcall-envoy", key: "envoy.yaml" })?.listeners;
 * ```
 */
export function seenConfig(
  context: Pick<ManifestContext, "configMaps">,
  namespace: unknown,
  source: { configMap: string; key: string },
): SeenConfig | undefined {
  const data = context.configMaps.get(configMapKey(namespace, source.configMap))?.data;
  const text = isRecord(data) ? data[source.key] : undefined;
  if (typeof text !== "string") return undefined;
  try {
    return readWires(parse(text));
  } catch {
    return { listeners: [], unseen: [`${source.key} (not YAML)`] };
  }
}

/**
 * Findings and notes on how a pod's traffic reaches its lastcall sidecar (`members`: the
 * proxies' containers, not apps).
 *
 * @example
 * ```ts
 * wiringChecks(template, undefined, manifestContext(objects), new Set(["lastcall"])).findings;
 * ```
 */
export function wiringChecks(
  template: PodTemplate,
  namespace: unknown,
  context: ManifestContext,
  members: ReadonlySet<string>,
): { findings: string[]; notes: string[] } {
  const spec = template.spec ?? {};
  const sidecar = podContainers(spec).find(({ container }) =>
    lastcallArgs(container)?.[0] === "run" && members.has(containerName(container))
  );
  if (!sidecar) return { findings: [], notes: [] };
  const apps = podContainers(spec).filter((e) =>
    !e.init && !members.has(containerName(e.container))
  ).map((e) => e.container);
  const declared = declaredAppPorts(apps);
  if (apps.length === 0) return { findings: [], notes: [] };
  const name = containerName(sidecar.container);
  const source = configSource(spec, sidecar.container);
  const seen = source && seenConfig(context, namespace, source);
  const listenerFor = (port: number) =>
    seen?.listeners.find((l) => l.appPorts.includes(port))?.port;
  const findings = context.services.filter((s) =>
    selects(s, template, typeof namespace === "string" ? namespace : undefined)
  )
    .flatMap((s) => bypasses(s, spec, new Set(apps.map(containerName)), listenerFor));
  const notes: string[] = [];
  if (declared.length === 0) return { findings, notes };
  if (!seen) {
    const where = source
      ? `ConfigMap ${source.configMap}, not in this manifest`
      : "not from a ConfigMap";
    notes.push(
      `${name}'s Envoy config (${where}): its listeners were not checked against the app ports`,
    );
    return { findings, notes };
  }
  if (seen.unseen.length) {
    notes.push(
      `${name}'s Envoy config has ${
        seen.unseen.join(", ")
      }: those listeners and routes were not checked`,
    );
  }
  for (const d of declared) {
    if (listenerFor(d.port) !== undefined) continue;
    findings.push(
      `${name} has no listener forwarding to container "${d.container}" port ${d.port} (ConfigMap ${
        source!.configMap
      }): requests to it cannot go through lastcall and are not drained; add an inbound listener to 127.0.0.1:${d.port} (lastcall inject writes one per declared port)`,
    );
  }
  return { findings, notes };
}
