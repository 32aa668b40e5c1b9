// The app's own readiness probe, sent through Envoy: inject points an app container's HTTP
// readiness probe at the listener in front of the port it probes, so the pod is Ready only while
// Envoy serves that port, and the sidecar needs no readiness probe of its own.
import { type Document, isMap, isSeq, type YAMLMap } from "yaml";
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
}

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
function probeWire(
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
    });
    http.set("port", wire.listenerPort);
  }
  return moved;
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
  return `container "${p.container}" readiness probe: port ${p.appPort} → ${p.listenerPort} (through Envoy, so the pod is Ready only while Envoy serves it; the sidecar has no readiness probe of its own)`;
}

function anchored(node: unknown): boolean {
  return isMap(node) && node.anchor !== undefined;
}
