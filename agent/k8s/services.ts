// Services and the pods they send to: which Services of a manifest select a pod template, and
// where each Service port lands in the pod (the container port its targetPort resolves to, as
// the EndpointSlice controller resolves it), so inject can rewire and check can flag bypasses.
import { containerName, type ContainerSpec } from "./containers.ts";
import { getPath, isRecord, type PodTemplate } from "./workloads.ts";

/** A Service of the manifest, read as plain values. */
export interface ServiceObject {
  /** `service/web`. */
  ref: string;
  namespace?: string;
  selector: Record<string, unknown>;
  ports: Record<string, unknown>[];
}

/**
 * Reads a Service object, or undefined for any other kind (or a Service without a selector).
 *
 * @example
 * ```ts
 * serviceOf({ kind: "Service", metadata: { name: "web" }, spec: { selector: { app: "web" }, ports: [] } })?.ref; // "service/web"
 * ```
 */
export function serviceOf(object: unknown): ServiceObject | undefined {
  if (!isRecord(object) || object.kind !== "Service") return undefined;
  const selector = getPath(object, ["spec", "selector"]);
  const ports = getPath(object, ["spec", "ports"]);
  if (!isRecord(selector) || Object.keys(selector).length === 0) return undefined;
  const name = getPath(object, ["metadata", "name"]);
  const namespace = getPath(object, ["metadata", "namespace"]);
  return {
    ref: `service/${typeof name === "string" ? name : "unnamed"}`,
    ...(typeof namespace === "string" ? { namespace } : {}),
    selector,
    ports: Array.isArray(ports) ? ports.filter(isRecord) : [],
  };
}

/**
 * Whether a Service sends to a pod template's pods: every selector label is on the pod, and
 * the namespaces are the same (one left unset counts as the same: `kubectl apply -n` puts both
 * in one).
 *
 * @example
 * ```ts
 * selects(service, findPodTemplate(deployment)!, "shop"); // true when every selector label is on the pod
 * ```
 */
export function selects(
  service: ServiceObject,
  template: PodTemplate,
  namespace: string | undefined,
): boolean {
  if (
    service.namespace !== undefined && namespace !== undefined && service.namespace !== namespace
  ) return false;
  return Object.entries(service.selector).every(([key, value]) =>
    String(template.labels[key]) === String(value)
  );
}

/** Where one Service port lands in the pod. */
export interface PortTarget {
  /** Its position in the Service's `ports`. */
  index: number;
  /** `port 80`, `port 80 (http)`. */
  what: string;
  /** The targetPort as written (absent: the port number). */
  targetPort: number | string;
  /** The container and its port number it resolves to; undefined when none declares it. */
  container?: string;
  port?: number;
}

/**
 * Resolves each TCP port of a Service against a pod spec: a number is that port (on whichever
 * container declares it), a name is the first container port of that name in the regular
 * containers, then in the native sidecars (Kubernetes' FindPort).
 *
 * @example
 * ```ts
 * portTargets(service, spec)[0]; // { index: 0, what: "port 80", targetPort: "http", container: "web", port: 8080 }
 * ```
 */
export function portTargets(service: ServiceObject, spec: Record<string, unknown>): PortTarget[] {
  const containers = Array.isArray(spec.containers) ? spec.containers.filter(isRecord) : [];
  const sidecars = (Array.isArray(spec.initContainers) ? spec.initContainers.filter(isRecord) : [])
    .filter((c) => c.restartPolicy === "Always");
  const declared = [...containers, ...sidecars].flatMap((c) =>
    tcpPorts(c).map((p) => ({ container: containerName(c), ...p }))
  );
  return service.ports.map((p, index) => ({ p, index })).filter(({ p }) =>
    (p.protocol ?? "TCP") === "TCP"
  ).map(({ p, index }) => {
    const targetPort = typeof p.targetPort === "number" || typeof p.targetPort === "string"
      ? p.targetPort
      : Number(p.port);
    const found = declared.find((
      d,
    ) => (typeof targetPort === "number" ? d.port === targetPort : d.name === targetPort));
    const what = `port ${String(p.port)}${typeof p.name === "string" ? ` (${p.name})` : ""}`;
    return {
      index,
      what,
      targetPort,
      ...(found
        ? { container: found.container, port: found.port }
        : typeof targetPort === "number"
        ? { port: targetPort }
        : {}),
    };
  });
}

/**
 * A container's declared TCP ports.
 *
 * @example
 * ```ts
 * tcpPorts({ name: "web", ports: [{ name: "http", containerPort: 8080 }] });
 * // [{ port: 8080, name: "http" }]
 * ```
 */
export function tcpPorts(c: ContainerSpec): { port: number; name?: string }[] {
  return (Array.isArray(c.ports) ? c.ports.filter(isRecord) : [])
    .filter((p) => typeof p.containerPort === "number" && (p.protocol ?? "TCP") === "TCP")
    .map((p) => ({
      port: p.containerPort as number,
      ...(typeof p.name === "string" ? { name: p.name } : {}),
    }));
}

/**
 * The lines for Service ports that reach an app container's declared port directly, not through
 * lastcall's Envoy (`apps`: the names of the app containers); `fix` names the listener to use.
 *
 * @example
 * ```ts
 * bypasses(service, spec, new Set(["web"]), (port) => 18080);
 * // ["service/web port 80 targetPort 8080 reaches container \"web\" port 8080 directly, …"]
 * ```
 */
export function bypasses(
  service: ServiceObject,
  spec: Record<string, unknown>,
  apps: ReadonlySet<string>,
  listenerFor: (port: number) => number | undefined,
): string[] {
  return portTargets(service, spec).filter((t) =>
    t.container !== undefined && apps.has(t.container)
  ).map((t) => {
    const listener = listenerFor(t.port!);
    const fix = listener === undefined
      ? "point it at an Envoy listener that forwards to the app"
      : `set targetPort: ${listener} (lastcall's listener for it)`;
    return `${service.ref} ${t.what} targetPort ${t.targetPort} reaches container "${t.container}" port ${t.port} directly (bypasses lastcall): its requests are not counted and not drained; ${fix}`;
  });
}
