// Traffic through the sidecar without capture: one inbound Envoy listener per app port, on a port
// of its own that Services are pointed at. Plans the ports, writes the Envoy config, and reads
// back which app ports a config's listeners forward to (inject of a user's config, and check).
import { containerName, type ContainerSpec, podContainers } from "./containers.ts";
import { ADMIN_PORT, STATUS_PORT } from "./sidecar.ts";
import { isRecord } from "./workloads.ts";

/** How far a listener's port is from the app port it fronts: 8080 → 18080. */
export const LISTENER_OFFSET = 10000;
/** Ports lastcall's sidecar itself takes: Envoy's admin (15000) and the status server (15020). */
export const OWN_PORTS: readonly number[] = [ADMIN_PORT, STATUS_PORT];

/** The declared ports of `containers`: each one's `ports` that are objects. */
const portsOf = (containers: readonly ContainerSpec[]) =>
  containers.flatMap((c) => (Array.isArray(c.ports) ? c.ports.filter(isRecord) : []));

/** The port numbers `containers` take in the pod (`containerPort`, `hostPort`). */
const takenBy = (containers: readonly ContainerSpec[]) =>
  new Set(portsOf(containers).flatMap((p) => [p.containerPort, p.hostPort]));

/**
 * The ports lastcall takes in a pod: its status server's ({@linkcode STATUS_PORT}) and Envoy's
 * admin ({@linkcode ADMIN_PORT}), each unless a container of the pod declares it (then the next
 * port up that none declares), so no probe reaches another process and no app loses its port.
 *
 * @example
 * ```ts
 * ownPorts({ containers: [{ name: "app", ports: [{ containerPort: 15000 }] }] });
 * // { status: 15020, admin: 15001 }
 * ```
 */
export function ownPorts(spec: Record<string, unknown>): { status: number; admin: number } {
  const taken: Set<unknown> = takenBy(podContainers(spec).map(({ container }) => container));
  const free = (from: number) => {
    let port = from;
    while (taken.has(port)) port++;
    return taken.add(port), port;
  };
  const status = free(STATUS_PORT);
  return { status, admin: free(ADMIN_PORT) };
}

/** One declared app port and what fronts it. */
export interface PortWire {
  /** The app container declaring it. */
  container: string;
  /** The app's port. */
  appPort: number;
  /** Envoy's listener port in front of it. */
  listenerPort: number;
  /** The port's name as the user wrote it: it moves to Envoy's port. */
  name?: string;
  /** The app port's new name, when it had one (the old one now names Envoy's port). */
  appName?: string;
  /** `http` (an HTTP connection manager) or `tcp` (tcp_proxy, for ports named as non-HTTP). */
  protocol: "http" | "tcp";
}

/** A port name read as a non-HTTP protocol (Istio's `<protocol>[-<suffix>]` naming). */
const TCP_NAME = /^(tcp|tls|https|mongo|mysql|postgres|redis|amqp|kafka|zookeeper)(-|$)/;

/**
 * The TCP ports the app containers declare, each once (the first container declaring it wins).
 *
 * @example
 * ```ts
 * declaredAppPorts([{ name: "web", ports: [{ name: "http", containerPort: 8080 }] }]);
 * // [{ container: "web", port: 8080, name: "http" }]
 * ```
 */
export function declaredAppPorts(
  apps: readonly ContainerSpec[],
): { container: string; port: number; name?: string }[] {
  const seen = new Set<number>();
  const out: { container: string; port: number; name?: string }[] = [];
  for (const app of apps) {
    for (const p of Array.isArray(app.ports) ? app.ports.filter(isRecord) : []) {
      const port = p.containerPort;
      if (
        typeof port !== "number" || seen.has(port) ||
        (p.protocol !== undefined && p.protocol !== "TCP")
      ) continue;
      seen.add(port);
      out.push({
        container: containerName(app),
        port,
        ...(typeof p.name === "string" ? { name: p.name } : {}),
      });
    }
  }
  return out;
}

/**
 * Envoy's port for each declared app port: the app port + {@linkcode LISTENER_OFFSET} (− when
 * that passes 65535), or the next port up that no container of the pod declares and that is
 * not one of lastcall's (`own`: its status server's and Envoy's admin). With `given` (app port →
 * listener port, read from a user's config), only those app ports, on those listeners.
 *
 * @example
 * ```ts
 * planWires([{ name: "web", ports: [{ name: "http", containerPort: 8080 }] }], []);
 * // [{ container: "web", appPort: 8080, listenerPort: 18080, name: "http", appName: "http-app", protocol: "http" }]
 * ```
 */
export function planWires(
  apps: readonly ContainerSpec[],
  others: readonly ContainerSpec[],
  own: readonly number[] = OWN_PORTS,
  given?: ReadonlyMap<number, number>,
): PortWire[] {
  const all = [...apps, ...others];
  const taken: Set<unknown> = new Set([...own, ...takenBy(all)]);
  const names = new Set(portsOf(all).map((p) => p.name).filter((n) => typeof n === "string"));
  const declared = declaredAppPorts(apps).filter(({ port }) => !given || given.has(port));
  return declared.map(({ container, port, name }) => {
    let listener = given?.get(port) ??
      (port + LISTENER_OFFSET <= 65535 ? port + LISTENER_OFFSET : port - LISTENER_OFFSET);
    while (!given && taken.has(listener)) listener = listener >= 65535 ? 1024 : listener + 1;
    taken.add(listener);
    const appName = name === undefined ? undefined : renamed(name, names);
    if (appName) names.add(appName);
    const protocol = name !== undefined && TCP_NAME.test(name) ? "tcp" : "http";
    return {
      container,
      appPort: port,
      listenerPort: listener,
      protocol,
      ...(name !== undefined ? { name, appName } : {}),
    };
  });
}

/**
 * The app port's new name: `<name>-app`, shortened to Kubernetes' 15 characters, unique in
 * the pod (`-ap2`, `-ap3` … when taken).
 */
function renamed(name: string, taken: ReadonlySet<string>): string {
  for (let i = 1;; i++) {
    const suffix = i === 1 ? "-app" : `-ap${i}`;
    const candidate = `${name.slice(0, 15 - suffix.length).replace(/-+$/, "")}${suffix}`;
    if (!taken.has(candidate)) return candidate;
  }
}

const HCM_TYPE =
  "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
const ROUTER_TYPE = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router";
const TCP_PROXY_TYPE = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy";
const HTTP_OPTIONS_TYPE =
  "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions";

/**
 * The Envoy config of a pod's wires: listeners and clusters only (`lastcall run` adds the
 * admin, its own cluster and its filter). HTTP listeners take HTTP/1.1 and HTTP/2 (h2c) and
 * speak to the app as the client spoke; no route timeout, no stream idle timeout, WebSocket
 * upgrades allowed: long requests, streams and WebSockets are never cut by the proxy.
 *
 * @example
 * ```ts
 * envoyConfig(planWires(apps, others)).static_resources.listeners[0].name; // "inbound_8080"
 * ```
 */
export function envoyConfig(
  wires: readonly PortWire[],
): { static_resources: { listeners: unknown[]; clusters: unknown[] } } {
  return {
    static_resources: {
      listeners: wires.map((w) => ({
        name: `inbound_${w.appPort}`,
        traffic_direction: "INBOUND",
        address: { socket_address: { address: "0.0.0.0", port_value: w.listenerPort } },
        filter_chains: [{ filters: [w.protocol === "tcp" ? tcpProxy(w) : httpManager(w)] }],
      })),
      clusters: wires.map((w) => ({
        name: `app_${w.appPort}`,
        type: "STATIC",
        connect_timeout: "5s",
        ...(w.protocol === "http"
          ? {
            typed_extension_protocol_options: {
              "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": HTTP_OPTIONS_TYPE,
                use_downstream_protocol_config: {
                  http_protocol_options: {},
                  http2_protocol_options: {},
                },
              },
            },
          }
          : {}),
        load_assignment: {
          cluster_name: `app_${w.appPort}`,
          endpoints: [{
            lb_endpoints: [{
              endpoint: {
                address: { socket_address: { address: "127.0.0.1", port_value: w.appPort } },
              },
            }],
          }],
        },
      })),
    },
  };
}

function httpManager(w: PortWire): Record<string, unknown> {
  return {
    name: "envoy.filters.network.http_connection_manager",
    typed_config: {
      "@type": HCM_TYPE,
      stat_prefix: `inbound_${w.appPort}`,
      codec_type: "AUTO",
      stream_idle_timeout: "0s",
      upgrade_configs: [{ upgrade_type: "websocket" }],
      route_config: {
        virtual_hosts: [{
          name: "app",
          domains: ["*"],
          routes: [{
            match: { prefix: "/" },
            route: { cluster: `app_${w.appPort}`, timeout: "0s" },
          }],
        }],
      },
      http_filters: [{ name: "envoy.filters.http.router", typed_config: { "@type": ROUTER_TYPE } }],
    },
  };
}

function tcpProxy(w: PortWire): Record<string, unknown> {
  return {
    name: "envoy.filters.network.tcp_proxy",
    typed_config: {
      "@type": TCP_PROXY_TYPE,
      stat_prefix: `inbound_${w.appPort}`,
      cluster: `app_${w.appPort}`,
    },
  };
}

/** An inbound listener of a config and the loopback ports it forwards to. */
export interface SeenListener {
  name: string;
  port: number;
  /** Ports on 127.0.0.1 (or localhost, ::1) its routes or tcp_proxy send to. */
  appPorts: number[];
}

/** What a config says about its inbound listeners; `unseen` names what cannot be read offline. */
export interface SeenConfig {
  listeners: SeenListener[];
  unseen: string[];
}

const LOOPBACK = new Set(["127.0.0.1", "localhost", "::1"]);
type Json = Record<string, unknown>;
const list = (v: unknown): Json[] => (Array.isArray(v) ? v.filter(isRecord) : []);

/**
 * Reads which app ports the inbound (not OUTBOUND) static listeners of an Envoy config forward
 * to, through HTTP routes or tcp_proxy to STATIC clusters on loopback.
 *
 * @example
 * ```ts
 * readWires(envoyConfig(wires)).listeners[0]; // { name: "inbound_8080", port: 18080, appPorts: [8080] }
 * ```
 */
export function readWires(config: unknown): SeenConfig {
  const resources = isRecord(config) && isRecord(config.static_resources)
    ? config.static_resources
    : {};
  const clusters = new Map(list(resources.clusters).map((c) => [String(c.name), loopbackPorts(c)]));
  const unseen: string[] = [];
  if (
    isRecord(config) && isRecord(config.dynamic_resources) &&
    config.dynamic_resources.lds_config !== undefined
  ) unseen.push("LDS");
  const listeners = list(resources.listeners).filter((l) =>
    l.traffic_direction !== "OUTBOUND" && l.traffic_direction !== 2
  ).map((l) => {
    const socket = isRecord(l.address) && isRecord(l.address.socket_address)
      ? l.address.socket_address
      : {};
    const chains = [
      ...list(l.filter_chains),
      ...(isRecord(l.default_filter_chain) ? [l.default_filter_chain] : []),
    ];
    const targets = chains.flatMap((c) => list(c.filters)).flatMap((f) =>
      clustersOf(f, () => unseen.push(`RDS of ${String(l.name)}`))
    );
    return {
      name: String(l.name ?? "(unnamed)"),
      port: Number(socket.port_value),
      appPorts: [...new Set(targets.flatMap((t) => clusters.get(t) ?? []))],
    };
  });
  return { listeners, unseen };
}

/** The clusters a network filter sends to (HTTP routes, or tcp_proxy). */
function clustersOf(filter: Json, rds: () => void): string[] {
  const typed = isRecord(filter.typed_config) ? filter.typed_config : {};
  if (typeof typed.cluster === "string") return [typed.cluster];
  if (typed.rds !== undefined) rds();
  const hosts = isRecord(typed.route_config) ? list(typed.route_config.virtual_hosts) : [];
  return hosts.flatMap((h) => list(h.routes)).map((
    r,
  ) => (isRecord(r.route) ? r.route.cluster : undefined)).filter((c): c is string =>
    typeof c === "string"
  );
}

/** The loopback ports a cluster's endpoints are on. */
function loopbackPorts(cluster: Json): number[] {
  const assignment = isRecord(cluster.load_assignment) ? cluster.load_assignment : {};
  return list(assignment.endpoints).flatMap((e) => list(e.lb_endpoints)).flatMap((e) => {
    const endpoint = isRecord(e.endpoint) && isRecord(e.endpoint.address)
      ? e.endpoint.address.socket_address
      : undefined;
    return isRecord(endpoint) && LOOPBACK.has(String(endpoint.address)) &&
        typeof endpoint.port_value === "number"
      ? [endpoint.port_value]
      : [];
  });
}
