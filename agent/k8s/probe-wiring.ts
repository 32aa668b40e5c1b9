// The app's own readiness probe, sent through Envoy: inject points an app container's HTTP
// readiness probe at the listener in front of the port it probes (native), or at lastcall's
// `/v1/app-ready`, which waits for Envoy and asks through that listener (classic). The pod is
// Ready only while Envoy serves that port, and the sidecar needs no readiness probe of its own.
import { type Document, isMap, isSeq, Scalar, type YAMLMap } from "yaml";
import { containerName, type ContainerSpec } from "./containers.ts";
import type { PortWire } from "./envoy-wiring.ts";
import { ownIn, ownItem, ownValue, valueOf } from "./own-node.ts";
import { tcpPorts } from "./services.ts";
import { SIDECAR_NAME } from "./sidecar.ts";
import { getPath } from "./workloads.ts";

/** One app container's readiness probe, now sent to Envoy's listener. */
export interface ProbeThroughEnvoy {
  container: string;
  /** The app port it probed. */
  appPort: number;
  /** Envoy's listener in front of it. */
  listenerPort: number;
  /** Classic: lastcall's status port, whose `/v1/app-ready` the probe now asks. */
  statusPort?: number;
}

/** The kubelet's default probe timeout, in seconds. */
const DEFAULT_TIMEOUT_S = 1;

/**
 * The wire an app container's readiness probe can go through: an `httpGet` in plain HTTP to
 * the pod's own address, on a port Envoy fronts with an HTTP listener. `undefined` for every
 * other probe (exec, tcpSocket, grpc, HTTPS, another host), which stays as written.
 *
 * @example
 * ```ts
 * probeWire({ name: "web", ports: [{ name: "http-app", containerPort: 8080 }],
 *   readinessProbe: { httpGet: { path: "/", port: "http-app" } } }, wires); // the 8080 wire
 * ```
 */
export function probeWire(
  c: ContainerSpec,
  wires: readonly PortWire[],
): PortWire | undefined {
  const http = getPath(c, ["readinessProbe", "httpGet"]) as Record<string, unknown> | undefined;
  if (!http || typeof http !== "object" || http.host !== undefined) return undefined;
  if (http.scheme !== undefined && String(http.scheme).toUpperCase() !== "HTTP") return undefined;
  const port = typeof http.port === "number"
    ? http.port
    : tcpPorts(c).find((p) => p.name === http.port)?.port;
  const name = containerName(c);
  return wires.find((w) => w.container === name && w.appPort === port && w.protocol === "http");
}

/**
 * Points each app container's HTTP readiness probe at Envoy's listener in front of its port
 * (after {@linkcode renameAppPorts}, whose names the probes may use). One entry per probe moved.
 * With `statusPort` (classic: the sidecar starts beside the app, so Envoy may not serve at the
 * first probe), the probe asks lastcall's `/v1/app-ready` there instead, which waits for Envoy
 * within the probe's timeout and then asks the same path through the listener.
 *
 * @example
 * ```ts
 * readinessThroughEnvoy(doc, spec, wires);
 * // [{ container: "web", appPort: 8080, listenerPort: 18080 }]
 * ```
 */
export function readinessThroughEnvoy(
  doc: Document,
  spec: YAMLMap,
  wires: readonly PortWire[],
  statusPort?: number,
): ProbeThroughEnvoy[] {
  const containers = ownValue(doc, spec, "containers");
  if (!isSeq(containers)) return [];
  const moved: ProbeThroughEnvoy[] = [];
  for (let i = 0; i < containers.items.length; i++) {
    const value = valueOf(doc, containers.items[i]) as ContainerSpec | null;
    if (!value || containerName(value) === SIDECAR_NAME) continue;
    const wire = probeWire(value, wires);
    if (!wire) continue;
    const c = ownItem(doc, containers, i);
    // A probe others alias (`&probe`) stays as written: editing it would move theirs too.
    const probe = isMap(c) ? c.get("readinessProbe", true) : undefined;
    if (anchored(probe) || (isMap(probe) && anchored(probe.get("httpGet", true)))) continue;
    const http = isMap(c) ? ownIn(doc, ["readinessProbe", "httpGet"], c) : undefined;
    if (!isMap(http)) continue;
    moved.push({
      container: wire.container,
      appPort: wire.appPort,
      listenerPort: wire.listenerPort,
      ...(statusPort !== undefined ? { statusPort } : {}),
    });
    if (statusPort === undefined) {
      http.set("port", wire.listenerPort);
      continue;
    }
    const timeout = getPath(value, ["readinessProbe", "timeoutSeconds"]);
    // Quoted: Kubernetes' YAML parser refuses a `?` inside a plain scalar of a flow mapping.
    const path = new Scalar(appReadyPath(wire.listenerPort, http.get("path"), timeout));
    path.type = Scalar.QUOTE_DOUBLE;
    http.set("path", path);
    http.set("port", statusPort);
  }
  return moved;
}

/**
 * The path of lastcall's `/v1/app-ready` for a probe of `path` through listener `port`, within
 * the probe's timeout (`timeoutSeconds`, the kubelet's default 1 s when unset).
 *
 * @example
 * ```ts
 * appReadyPath(18080, "/ready", undefined); // "/v1/app-ready?port=18080&timeout_ms=1000&path=/ready"
 * ```
 */
export function appReadyPath(port: number, path: unknown, timeoutSeconds: unknown): string {
  const seconds = Number.isInteger(timeoutSeconds) && (timeoutSeconds as number) > 0
    ? timeoutSeconds as number
    : DEFAULT_TIMEOUT_S;
  // A slash needs no escape in a query; everything else that could end the value does.
  const asked = encodeURIComponent(typeof path === "string" && path !== "" ? path : "/")
    .replaceAll("%2F", "/");
  return `/v1/app-ready?port=${port}&timeout_ms=${seconds * 1000}&path=${asked}`;
}

/**
 * The line inject prints for a probe it moved.
 *
 * @example
 * ```ts
 * throughEnvoyNote({ container: "web", appPort: 8080, listenerPort: 18080 });
 * // 'container "web" readiness probe: port 8080 → 18080 (through Envoy, …)'
 * ```
 */
export function throughEnvoyNote(p: ProbeThroughEnvoy): string {
  const to = p.statusPort === undefined
    ? `${p.listenerPort} (through Envoy`
    : `lastcall's ${p.statusPort} /v1/app-ready (which waits for Envoy, then asks through its listener ${p.listenerPort}`;
  return `container "${p.container}" readiness probe: port ${p.appPort} → ${to}, so the pod is Ready only while Envoy serves it; the sidecar has no readiness probe of its own)`;
}

function anchored(node: unknown): boolean {
  return isMap(node) && node.anchor !== undefined;
}
