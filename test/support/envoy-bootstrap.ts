// Envoy bootstraps for tests: the lastcall filter loaded from dist/filter.wasm, a static cluster
// to a local port, an HTTP listener on loopback, and one such listener (port 0) running the
// filter in front of an app.
import { fileURLToPath } from "node:url";

/** Absolute path of the filter module the tests load. */
export const FILTER_WASM = fileURLToPath(new URL("../../dist/filter.wasm", import.meta.url));

/** Options of {@linkcode wasmFilterConfig}. */
export interface WasmFilterOptions {
  /** Plugin configuration (JSON text, or an object serialized to JSON). @default "" */
  configuration?: string | Record<string, unknown>;
  /** VM id: VMs with the same id share one counter. @default "lastcall_inflight" */
  vmId?: string;
  /** Module path. @default FILTER_WASM */
  wasm?: string;
}

/** The `config` block (envoy.extensions.wasm.v3.PluginConfig) loading the lastcall filter. */
export function wasmPluginConfig(options: WasmFilterOptions = {}): Record<string, unknown> {
  const configuration = typeof options.configuration === "object"
    ? JSON.stringify(options.configuration)
    : options.configuration ?? "";
  return {
    name: "lastcall",
    root_id: "lastcall_inflight",
    vm_config: {
      vm_id: options.vmId ?? "lastcall_inflight",
      runtime: "envoy.wasm.runtime.v8",
      code: { local: { filename: options.wasm ?? FILTER_WASM } },
    },
    configuration: {
      "@type": "type.googleapis.com/google.protobuf.StringValue",
      value: configuration,
    },
  };
}

/** A static cluster to 127.0.0.1:`port` (HTTP/1.1; `http2` for an h2c upstream). */
export function localCluster(
  name: string,
  port: number,
  options: { http2?: boolean } = {},
): Record<string, unknown> {
  return {
    name,
    type: "STATIC",
    connect_timeout: "1s",
    load_assignment: {
      cluster_name: name,
      endpoints: [{
        lb_endpoints: [{
          endpoint: { address: { socket_address: { address: "127.0.0.1", port_value: port } } },
        }],
      }],
    },
    ...(options.http2
      ? {
        typed_extension_protocol_options: {
          "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
            explicit_http_config: { http2_protocol_options: {} },
          },
        },
      }
      : {}),
  };
}

/** A user's config with one INBOUND tcp_proxy listener, `tcp_in`, in front of 127.0.0.1:`upstreamPort`. */
export function tcpProxyConfig(upstreamPort: number): Record<string, unknown> {
  return {
    static_resources: {
      listeners: [{
        name: "tcp_in",
        traffic_direction: "INBOUND",
        address: { socket_address: { address: "127.0.0.1", port_value: 0 } },
        filter_chains: [{
          filters: [{
            name: "envoy.filters.network.tcp_proxy",
            typed_config: {
              "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
              stat_prefix: "tcp_in",
              cluster: "app",
            },
          }],
        }],
      }],
      clusters: [localCluster("app", upstreamPort)],
    },
  };
}

/** The router, the last HTTP filter of every connection manager built here. */
export const ROUTER = {
  name: "envoy.filters.http.router",
  typed_config: { "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router" },
};

/** Options of {@linkcode httpListener}. */
export interface HttpListenerOptions {
  /** Listener name. */
  name: string;
  /** The connection manager's stat prefix. @default name */
  statPrefix?: string;
  /** `traffic_direction`; omitted: none. */
  direction?: "INBOUND" | "OUTBOUND";
  /** Port on 127.0.0.1. @default 0 */
  port?: number;
  /** The virtual host's name. @default "app" */
  virtualHost?: string;
  /** Its routes. @default every path to cluster `app`, no timeout */
  routes?: unknown[];
  /** HTTP filters, the router last. @default [ROUTER] */
  httpFilters?: unknown[];
}

/**
 * An HTTP listener on 127.0.0.1 (codec AUTO: HTTP/1.1, h2c prior knowledge, WebSocket upgrades)
 * with one virtual host for every domain.
 *
 * @example
 * const listener = httpListener({ name: "ingress", direction: "INBOUND" });
 */
export function httpListener(options: HttpListenerOptions): Record<string, unknown> {
  return {
    name: options.name,
    ...(options.direction && { traffic_direction: options.direction }),
    address: { socket_address: { address: "127.0.0.1", port_value: options.port ?? 0 } },
    filter_chains: [{
      filters: [{
        name: "envoy.filters.network.http_connection_manager",
        typed_config: {
          "@type":
            "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
          stat_prefix: options.statPrefix ?? options.name,
          codec_type: "AUTO",
          upgrade_configs: [{ upgrade_type: "websocket" }],
          route_config: {
            virtual_hosts: [{
              name: options.virtualHost ?? "app",
              domains: ["*"],
              routes: options.routes ??
                [{ match: { prefix: "/" }, route: { cluster: "app", timeout: "0s" } }],
            }],
          },
          http_filters: options.httpFilters ?? [ROUTER],
        },
      }],
    }],
  };
}

/** Options of {@linkcode httpBootstrap}. */
export interface HttpBootstrapOptions {
  /** Port of the upstream app. */
  upstreamPort: number;
  /** Port of the test's agent stand-in (cluster `lastcall_agent`); omitted: cluster to a closed port. */
  agentPort?: number;
  /** Plugin configuration. @default "" */
  configuration?: string | Record<string, unknown>;
  /** Listener name. @default "ingress" */
  listener?: string;
}

/**
 * A bootstrap with one HTTP listener (codec AUTO: HTTP/1.1, h2c prior knowledge, WebSocket
 * upgrades) running the lastcall filter in front of the router to cluster `app`.
 */
export function httpBootstrap(options: HttpBootstrapOptions): Record<string, unknown> {
  return {
    static_resources: {
      listeners: [httpListener({
        name: options.listener ?? "ingress",
        statPrefix: "ingress",
        virtualHost: "all",
        httpFilters: [
          {
            name: "envoy.filters.http.wasm",
            typed_config: {
              "@type": "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm",
              config: wasmPluginConfig({ configuration: options.configuration }),
            },
          },
          ROUTER,
        ],
      })],
      clusters: [
        localCluster("app", options.upstreamPort),
        localCluster("lastcall_agent", options.agentPort ?? 9),
      ],
    },
  };
}
