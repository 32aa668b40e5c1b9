// What makes traffic go through the injected Envoy: the wires of a pod (generated, or read from
// the user's ConfigMap when the manifest has it), the app ports' names moved to Envoy's ports,
// the generated ConfigMap, and the Services of the manifest pointed at Envoy's listeners.
import { createHash } from "node:crypto";
import { type Document, isMap, isSeq, parse, stringify, type YAMLMap } from "yaml";
import { containerName, type ContainerSpec } from "./containers.ts";
import { envoyConfig, planWires, type PortWire, readWires } from "./envoy-wiring.ts";
import { ownIn, ownItem, ownValue, valueOf } from "./own-node.ts";
import { portTargets, selects, type ServiceObject, serviceOf } from "./services.ts";
import type { ManifestDocument } from "./manifest.ts";
import { getPath, isRecord, type PodTemplate } from "./workloads.ts";

/** The key of the Envoy config in the ConfigMap (mounted as /etc/envoy/envoy.yaml). */
export const CONFIG_KEY = "envoy.yaml";

/** A ConfigMap or a Service of the manifest, with the node inject may edit. */
export interface ManifestObject<T> {
  value: T;
  node: YAMLMap;
  doc: Document;
}

/** What the rest of the manifest offers a pod's wiring. */
export interface WiringContext {
  /** ConfigMaps by `namespace/name` (namespace empty when unset). */
  configMaps: Map<string, Record<string, unknown>>;
  services: ManifestObject<ServiceObject>[];
  /** The ConfigMaps inject writes in this run, by `namespace/name`. */
  generated: Set<string>;
  /** How many objects of the manifest have each `namespace/Kind/name`. */
  objects: Map<string, number>;
}

/**
 * The ConfigMaps, Services and object names of the manifest, for the pods' wiring.
 *
 * @example
 * ```ts
 * const context = contextOf(readManifest(text)); // context.configMaps.get("/web-lastcall-envoy")
 * ```
 */
export function contextOf(documents: readonly ManifestDocument[]): WiringContext {
  const context: WiringContext = {
    configMaps: new Map(),
    services: [],
    generated: new Set(),
    objects: new Map(),
  };
  for (const { doc } of documents) {
    for (const node of objectsOf(doc)) {
      const value = valueOf(doc, node) as Record<string, unknown>;
      const id = objectKey(value);
      context.objects.set(id, (context.objects.get(id) ?? 0) + 1);
      const service = serviceOf(value);
      if (service) context.services.push({ value: service, node, doc });
      const metadata = getPath(value, ["metadata"]) as Record<string, unknown> | undefined;
      if (value.kind === "ConfigMap" && typeof metadata?.name === "string") {
        context.configMaps.set(key(metadata.namespace, metadata.name), value);
      }
    }
  }
  return context;
}

/**
 * An object's `namespace/Kind/name`: two objects of one key are one object to the API.
 *
 * @example
 * ```ts
 * objectKey({ kind: "Job", metadata: { name: "web", namespace: "a" } }); // "a/Job/web"
 * ```
 */
export function objectKey(value: Record<string, unknown>): string {
  return key(getPath(value, ["metadata", "namespace"]), workloadRef(value));
}

/**
 * The objects of a document: the document itself, or the items of a `kind: List`.
 *
 * @example
 * ```ts
 * for (const node of objectsOf(doc)) console.log(valueOf(doc, node));
 * ```
 */
export function objectsOf(doc: Document): YAMLMap[] {
  const root = doc.contents;
  if (!isMap(root)) return [];
  const kind = (valueOf(doc, root) as { kind?: unknown }).kind;
  if (typeof kind !== "string" || !/List$/.test(kind)) return [root];
  const items = ownValue(doc, root, "items");
  return isSeq(items) ? items.items.map((_, i) => ownItem(doc, items, i)).filter(isMap) : [];
}

/** How a pod's traffic reaches Envoy. */
export interface Wiring {
  /** The ConfigMap mounted at /etc/envoy. */
  configMap: string;
  /** Whether inject writes that ConfigMap (else it is the user's). */
  generate: boolean;
  /** App port → Envoy listener; undefined when the user's config is not in the manifest. */
  wires?: PortWire[];
}

/**
 * The ConfigMap name inject writes for a workload: `<name>-lastcall-envoy`; a name too long
 * for that (a ConfigMap's is at most 253 characters, with room left for `-<kind>` when two
 * workloads share it) is cut and ends with 8 hex digits of its hash, so it stays its own.
 *
 * @example
 * ```ts
 * generatedName({ kind: "Deployment", metadata: { name: "web" } }); // "web-lastcall-envoy"
 * ```
 */
export function generatedName(object: Record<string, unknown>): string {
  const written = getPath(object, ["metadata", "name"]) ??
    String(getPath(object, ["metadata", "generateName"]) ?? "").replace(/-+$/, "");
  const name = typeof written === "string" && written ? written : "workload";
  const longest = 253 - "-lastcall-envoy".length - "-statefulset".length;
  if (name.length <= longest) return `${name}-lastcall-envoy`;
  const hash = createHash("sha256").update(name).digest("hex").slice(0, 8);
  return `${name.slice(0, longest - 9).replace(/[-.]+$/, "")}-${hash}-lastcall-envoy`;
}

/**
 * The annotation on a ConfigMap inject wrote: the workload it was written for, `Kind/name`.
 * Another workload of the same name never takes that ConfigMap as its own.
 */
export const WORKLOAD_ANNOTATION = "lastcall/workload";

/**
 * Why `metadata.name` is no name to Kubernetes, which reads YAML 1.1 (an unquoted `n` is the
 * boolean false there); undefined when it is a string or absent.
 *
 * @example
 * ```ts
 * nameRefusal({ metadata: { name: false } }); // "metadata.name is read as false, not a string: …"
 * ```
 */
export function nameRefusal(object: Record<string, unknown>): string | undefined {
  const name = getPath(object, ["metadata", "name"]);
  if (name === undefined || typeof name === "string") return undefined;
  return `metadata.name is read as ${
    JSON.stringify(name)
  }, not a string: Kubernetes reads YAML 1.1, where an unquoted y, n, yes, no, on or off is a boolean (quote it)`;
}

/**
 * A workload's `Kind/name` (`generateName` when it has no name).
 *
 * @example
 * ```ts
 * workloadRef({ kind: "Deployment", metadata: { name: "web" } }); // "Deployment/web"
 * ```
 */
export function workloadRef(object: Record<string, unknown>): string {
  const name = getPath(object, ["metadata", "name"]) ??
    getPath(object, ["metadata", "generateName"]);
  return `${String(object.kind)}/${typeof name === "string" ? name : ""}`;
}

const key = (namespace: unknown, name: string) =>
  `${typeof namespace === "string" ? namespace : ""}/${name}`;

/**
 * The wiring of a pod, or the reason it has none: `--config-map`, or a ConfigMap of the
 * generated name already in the manifest, is the user's (read when present, never
 * overwritten); otherwise inject writes one for the declared ports, and a pod that declares
 * none cannot be wired.
 *
 * @example
 * ```ts
 * const wiring = wiringOf(object, template, undefined, [15020, 15000], context);
 * if (typeof wiring === "string") warn(wiring); // the pod cannot be wired
 * ```
 */
export function wiringOf(
  object: Record<string, unknown>,
  template: PodTemplate,
  given: string | undefined,
  lastcallPorts: readonly number[],
  context: WiringContext,
): Wiring | string {
  const namespace = getPath(object, ["metadata", "namespace"]);
  const generated = generatedName(object);
  const found = context.configMaps.get(key(namespace, generated));
  const writtenFor = getPath(found ?? {}, ["metadata", "annotations", WORKLOAD_ANNOTATION]);
  const ours = found !== undefined &&
    (writtenFor === undefined || writtenFor === workloadRef(object));
  const own = given ?? (ours ? generated : undefined);
  const { apps, others } = splitContainers(template.spec!);
  if (own !== undefined) {
    const inManifest = context.configMaps.get(key(namespace, own));
    const data = inManifest?.data;
    const text = isRecord(data) ? data[CONFIG_KEY] : undefined;
    if (inManifest && typeof text !== "string") {
      return `ConfigMap ${own} in this manifest has no ${CONFIG_KEY}, the file lastcall runs Envoy with: left as is (add it)`;
    }
    return {
      configMap: own,
      generate: false,
      ...(typeof text === "string" ? { wires: wiresFrom(text, apps, others, lastcallPorts) } : {}),
    };
  }
  const wires = planWires(apps, others, lastcallPorts);
  // Two workloads of one name (a Deployment and a Job `web`): the second's name has its kind.
  const taken = context.generated.has(key(namespace, generated)) || found !== undefined;
  const name = taken
    ? generated.replace(/-lastcall-envoy$/, `-${template.kind.toLowerCase()}-lastcall-envoy`)
    : generated;
  if (wires.length > 0) {
    return context.generated.add(key(namespace, name)), { configMap: name, generate: true, wires };
  }
  return "no container declares a TCP containerPort, so lastcall cannot tell which ports to put Envoy in front of: left as is (declare the app's ports, or write your listeners in a ConfigMap and pass --config-map NAME)";
}

/** The pod's app containers (regular ones) and the others (init containers). */
function splitContainers(
  spec: Record<string, unknown>,
): { apps: ContainerSpec[]; others: ContainerSpec[] } {
  const of = (k: string) => (Array.isArray(spec[k]) ? (spec[k] as unknown[]).filter(isRecord) : []);
  return { apps: of("containers"), others: of("initContainers") };
}

/** The wires a user's config makes: its inbound listeners that forward to a declared app port. */
function wiresFrom(
  text: string,
  apps: ContainerSpec[],
  others: ContainerSpec[],
  own: readonly number[],
): PortWire[] {
  let config: unknown;
  try {
    config = parse(text);
  } catch {
    return [];
  }
  const given = new Map<number, number>();
  for (const l of readWires(config).listeners) {
    for (const port of l.appPorts) if (!given.has(port)) given.set(port, l.port);
  }
  return planWires(apps, others, own, given);
}

/**
 * The sidecar's `ports`: Envoy's listeners, each named as the app port it fronts was.
 *
 * @example
 * ```ts
 * sidecarPorts(wires); // [{ name: "http", containerPort: 18080 }]
 * ```
 */
export function sidecarPorts(wires: readonly PortWire[]): Record<string, unknown>[] {
  return wires.map((w) => ({
    ...(w.name !== undefined ? { name: w.name } : {}),
    containerPort: w.listenerPort,
  }));
}

/**
 * The generated ConfigMap, as a plain object.
 *
 * @example
 * ```ts
 * configMapObject(deployment, "web-lastcall-envoy", wires).data; // { "envoy.yaml": "# Written by …" }
 * ```
 */
export function configMapObject(
  object: Record<string, unknown>,
  name: string,
  wires: readonly PortWire[],
): Record<string, unknown> {
  const namespace = getPath(object, ["metadata", "namespace"]);
  const header =
    "# Written by `lastcall inject`: one inbound listener per app port (lastcall run adds its\n# admin, cluster and filter). Yours to edit: inject never overwrites a ConfigMap of this name.\n";
  return {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: {
      name,
      ...(typeof namespace === "string" ? { namespace } : {}),
      annotations: { [WORKLOAD_ANNOTATION]: workloadRef(object) },
    },
    data: { [CONFIG_KEY]: header + stringify(envoyConfig(wires), { lineWidth: 0 }) },
  };
}

const PROBES = ["livenessProbe", "readinessProbe", "startupProbe"];
const HOOKS = ["postStart", "preStop"];

/**
 * Renames each fronted app port that has a name (its name moves to Envoy's port, so Services
 * that name it reach Envoy), and the container's own probes and hooks that use the old name.
 *
 * @example
 * ```ts
 * renameAppPorts(doc, spec, wires); // ports: [{ name: http-app, containerPort: 8080 }]
 * ```
 */
export function renameAppPorts(doc: Document, spec: YAMLMap, wires: readonly PortWire[]): void {
  const containers = ownValue(doc, spec, "containers");
  if (!isSeq(containers)) return;
  for (let i = 0; i < containers.items.length; i++) {
    const c = ownItem(doc, containers, i);
    if (!isMap(c)) continue;
    const name = containerName(valueOf(doc, c) as ContainerSpec);
    for (
      const w of wires.filter((w) =>
        w.container === name && w.name !== undefined && w.appName !== undefined
      )
    ) {
      const ports = ownValue(doc, c, "ports");
      if (!isSeq(ports)) continue;
      ports.items.forEach((_, j) => {
        const port = ownItem(doc, ports, j);
        if (isMap(port) && (valueOf(doc, port) as Record<string, unknown>).name === w.name) {
          port.set("name", w.appName);
        }
      });
      const handlers = [...PROBES.map((k) => [k]), ...HOOKS.map((k) => ["lifecycle", k])];
      for (const path of handlers) {
        for (const kind of ["httpGet", "tcpSocket"]) {
          const value = getPath(valueOf(doc, c), [...path, kind, "port"]);
          if (value !== w.name) continue;
          const handler = ownIn(doc, [...path, kind], c);
          if (isMap(handler)) handler.set("port", w.appName);
        }
      }
    }
  }
}

/**
 * Points the Service ports that reach a fronted app port at Envoy's listener: a number is
 * replaced by the listener's; a name needs nothing (it now names Envoy's port). One line each.
 *
 * @example
 * ```ts
 * rewireServices(template, undefined, wires, context, spec);
 * // ["service/web port 80: targetPort 8080 → 18080 (…)"]
 * ```
 */
export function rewireServices(
  template: PodTemplate,
  namespace: string | undefined,
  wires: readonly PortWire[],
  context: WiringContext,
  spec: Record<string, unknown>,
): string[] {
  const lines: string[] = [];
  for (const { value: service, node, doc } of context.services) {
    if (!selects(service, template, namespace)) continue;
    const targets = portTargets(service, spec);
    const ports = ownIn(doc, ["spec", "ports"], node);
    if (!isSeq(ports)) continue;
    targets.forEach((t) => {
      const wire = wires.find((
        w,
      ) => (typeof t.targetPort === "number"
        ? w.appPort === t.targetPort
        : w.name === t.targetPort)
      );
      if (!wire) return;
      const item = ownItem(doc, ports, t.index);
      if (typeof t.targetPort === "string") {
        lines.push(
          `${service.ref} ${t.what}: targetPort ${t.targetPort} now names lastcall's listener ${wire.listenerPort} (container "${wire.container}" port ${wire.appPort} is renamed ${wire.appName})`,
        );
      } else if (isMap(item)) {
        item.set("targetPort", wire.listenerPort);
        lines.push(
          `${service.ref} ${t.what}: targetPort ${t.targetPort} → ${wire.listenerPort} (lastcall's listener in front of container "${wire.container}" port ${wire.appPort})`,
        );
      }
    });
  }
  return lines;
}
