// The Envoy configs the deriveBootstrap tests (bootstrap.test.ts, bootstrap-listeners.test.ts)
// build their inputs from: listeners with an HTTP connection manager or tcp_proxy, and options.
import { ROUTER } from "../support/envoy-bootstrap.ts";
import type { Json } from "../support/json.ts";

/** An HTTP connection manager with `statPrefix` and only the router. */
export function hcm(statPrefix: string): Json {
  return {
    name: "envoy.filters.network.http_connection_manager",
    typed_config: {
      "@type":
        "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
      stat_prefix: statPrefix,
      route_config: { virtual_hosts: [] },
      http_filters: [ROUTER],
    },
  };
}

/** A listener on 0.0.0.0:8080 with one filter chain of `filters`, marked `direction` if given. */
export function listener(name: string, direction?: string, filters: Json[] = [hcm(name)]): Json {
  return {
    name,
    ...(direction ? { traffic_direction: direction } : {}),
    address: { socket_address: { address: "0.0.0.0", port_value: 8080 } },
    filter_chains: [{ filters }],
  };
}

/** A tcp_proxy network filter to cluster app. */
export const tcpProxy = {
  name: "envoy.filters.network.tcp_proxy",
  typed_config: {
    "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
    stat_prefix: "tcp",
    cluster: "app",
  },
};
/** deriveBootstrap options without a filter (as --no-filter). */
export const options = { adminPort: 15000, statusAddress: "127.0.0.1", statusPort: 15020 };
/** deriveBootstrap options with the filter and its plugin configuration. */
export const withFilter = {
  ...options,
  filter: { wasmPath: "/opt/filter.wasm", pluginConfig: { heartbeat_ms: 1000 } },
};

/** Names of the HTTP filters of a listener's first connection manager. */
export const httpFilterNames = (config: Json, index: number) =>
  config.static_resources.listeners[index].filter_chains[0].filters.find((f: Json) =>
    f.typed_config.http_filters
  )
    .typed_config.http_filters.map((f: Json) => f.name);
