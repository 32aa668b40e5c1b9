// The Envoy configurations the benchmarks run: one listener named `ingress` (INBOUND, codec AUTO,
// WebSocket upgrades) in front of cluster `app` or a direct response, the same for every contender.
import {
  FILTER_WASM,
  httpListener,
  localCluster,
  ROUTER,
} from "../../test/support/envoy-bootstrap.ts";

/** Where Envoy's admin listens. */
export type AdminAddress = { port: number } | { pipe: string };

/** What runs in the HTTP filter chain before the router. */
export type FilterVariant =
  | { kind: "none" }
  | { kind: "wasm"; wasm: string; vmId: string; rootId: string; configuration: string };

/** Options of {@linkcode benchBootstrap}. */
export interface BenchBootstrapOptions {
  /** Admin address; omitted: no admin (lastcall adds its own). */
  admin?: AdminAddress;
  /** Listener port. @default 0 */
  listenerPort?: number;
  /** Upstream app port (cluster `app`); omitted: the route answers 200 itself (direct_response). */
  upstreamPort?: number;
  /** Filter before the router. @default none */
  filter?: FilterVariant;
  /** Extra static clusters `c0…c<n-1>` to grow the stats (item 2). @default 0 */
  extraClusters?: number;
  /** Port of a report sink, as cluster `lastcall_agent`. */
  agentPort?: number;
  /** With `admin`: a file where Envoy logs every admin request (`<start time, s.ms> <method> <path>`). */
  adminAccessLog?: string;
}

/**
 * Admin access log lines: wall-clock second (ms precision) Envoy received the request, method
 * and path, e.g. `1795504984.406 POST /quitquitquit` (read by {@linkcode adminRequestTimes}).
 */
const ADMIN_LOG_FORMAT = "%START_TIME(%s.%3f)% %REQ(:METHOD)% %REQ(:PATH)%\n";

/** When Envoy received each admin request `method path` (Date.now() ms), from an admin access log's text. */
export function adminRequestTimes(log: string, method: string, path: string): number[] {
  return log.split("\n").map((line) => line.split(" ")).filter((f) =>
    f[1] === method && f[2] === path
  ).map((f) => Math.round(Number(f[0]) * 1000));
}

/** The lastcall filter as `lastcall run` would configure it, for Envoys run without the agent. */
export function lastcallFilter(
  wasm = FILTER_WASM,
  configuration = '{"heartbeat_ms":1000}',
): FilterVariant {
  return {
    kind: "wasm",
    wasm,
    vmId: "lastcall_inflight",
    rootId: "lastcall_inflight",
    configuration,
  };
}

/** A bootstrap with the `ingress` listener, as JSON-ready object. */
export function benchBootstrap(options: BenchBootstrapOptions): Record<string, unknown> {
  const filter = options.filter ?? { kind: "none" };
  const httpFilters: unknown[] = [];
  if (filter.kind === "wasm") {
    httpFilters.push({
      name: "envoy.filters.http.wasm",
      typed_config: {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm",
        config: {
          name: filter.vmId,
          root_id: filter.rootId,
          vm_config: {
            vm_id: filter.vmId,
            runtime: "envoy.wasm.runtime.v8",
            code: { local: { filename: filter.wasm } },
          },
          configuration: {
            "@type": "type.googleapis.com/google.protobuf.StringValue",
            value: filter.configuration,
          },
        },
      },
    });
  }
  httpFilters.push(ROUTER);
  const route = options.upstreamPort === undefined
    ? { match: { prefix: "/" }, direct_response: { status: 200, body: { inline_string: "ok" } } }
    : { match: { prefix: "/" }, route: { cluster: "app", timeout: "0s" } };
  const clusters: unknown[] = [];
  if (options.upstreamPort !== undefined) clusters.push(localCluster("app", options.upstreamPort));
  if (options.agentPort !== undefined) {
    clusters.push(localCluster("lastcall_agent", options.agentPort));
  }
  for (let i = 0; i < (options.extraClusters ?? 0); i++) {
    clusters.push(localCluster(`c${i}`, options.upstreamPort ?? 9));
  }
  const config: Record<string, unknown> = {
    static_resources: {
      listeners: [httpListener({
        name: "ingress",
        direction: "INBOUND",
        port: options.listenerPort,
        routes: [route],
        httpFilters,
      })],
      clusters,
    },
  };
  if (options.admin) {
    const admin: Record<string, unknown> = "port" in options.admin
      ? { address: { socket_address: { address: "127.0.0.1", port_value: options.admin.port } } }
      : { address: { pipe: { path: options.admin.pipe } } };
    if (options.adminAccessLog) {
      admin.access_log = [{
        name: "envoy.access_loggers.file",
        typed_config: {
          "@type": "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog",
          path: options.adminAccessLog,
          log_format: { text_format_source: { inline_string: ADMIN_LOG_FORMAT } },
        },
      }];
    }
    config.admin = admin;
  }
  return config;
}
