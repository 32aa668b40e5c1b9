// Envoy resources and bootstraps for the xDS tests, in Envoy's JSON: what a user's control plane
// serves and what a user's bootstrap says. None of them carries the filter: lastcall adds it.
import { request } from "node:http";
import { localCluster, ROUTER } from "../support/envoy-bootstrap.ts";
import type { Json } from "../support/json.ts";

const HCM =
  "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
const H2 = {
  "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
    "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
    explicit_http_config: { http2_protocol_options: {} },
  },
};

/** SotW or delta xDS. */
export type XdsVariant = "sotw" | "delta";
/** ADS, or LDS on its own gRPC stream. */
export type XdsService = "ads" | "lds";

/** A route configuration answering from cluster `app`, tagging responses with `x-version`. */
export function route(
  name: string,
  version: string,
  headers: Record<string, string> = {},
): Record<string, unknown> {
  return {
    name,
    virtual_hosts: [{
      name: "app",
      domains: ["*"],
      routes: [{ match: { prefix: "/" }, route: { cluster: "app", timeout: "0s" } }],
      response_headers_to_add: Object.entries({ "x-version": version, ...headers }).map((
        [key, value],
      ) => ({ header: { key, value } })),
    }],
  };
}

/** An HTTP connection manager filter: routes from RDS (`rds` names the route) or inline. */
export function hcm(
  statPrefix: string,
  routes: { rds: string; source: Record<string, unknown> } | { inline: Record<string, unknown> },
): Record<string, unknown> {
  return {
    name: "envoy.filters.network.http_connection_manager",
    typed_config: {
      "@type": HCM,
      stat_prefix: statPrefix,
      ...("rds" in routes
        ? { rds: { route_config_name: routes.rds, config_source: routes.source } }
        : { route_config: routes.inline }),
      http_filters: [ROUTER],
    },
  };
}

/** An HTTP listener on 127.0.0.1:`port` with one filter chain. */
export function httpListener(
  name: string,
  port: number,
  chain: Record<string, unknown>,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    name,
    address: { socket_address: { address: "127.0.0.1", port_value: port } },
    filter_chains: [{ filters: [chain] }],
    ...extra,
  };
}

/** The cluster of the app, as CDS serves it. */
export function appCluster(port: number): Record<string, unknown> {
  return localCluster("app", port);
}

/** Config source of RDS/CDS in a bootstrap: ADS, or the control plane directly (not through lastcall). */
export function configSource(service: XdsService, variant: XdsVariant): Record<string, unknown> {
  if (service === "ads") return { ads: {}, resource_api_version: "V3" };
  return {
    resource_api_version: "V3",
    api_config_source: {
      api_type: variant === "delta" ? "DELTA_GRPC" : "GRPC",
      transport_api_version: "V3",
      grpc_services: [{ envoy_grpc: { cluster_name: "xds_cluster" } }],
    },
  };
}

/** Options of {@linkcode xdsBootstrap}. */
export interface XdsBootstrapOptions {
  xdsPort: number;
  service: XdsService;
  variant: XdsVariant;
  /** The xds_cluster's transport_socket (mTLS to the control plane). */
  transportSocket?: Record<string, unknown>;
}

/** A user's bootstrap with listeners, routes and clusters from a control plane, Contour-style. */
export function xdsBootstrap(o: XdsBootstrapOptions): Record<string, unknown> {
  const xdsCluster = {
    ...localCluster("xds_cluster", o.xdsPort),
    typed_extension_protocol_options: H2,
    ...(o.transportSocket ? { transport_socket: o.transportSocket } : {}),
  };
  return {
    node: { id: "test-node", cluster: "test" },
    dynamic_resources: {
      ...(o.service === "ads"
        ? {
          ads_config: {
            api_type: o.variant === "delta" ? "DELTA_GRPC" : "GRPC",
            transport_api_version: "V3",
            grpc_services: [{ envoy_grpc: { cluster_name: "xds_cluster" } }],
          },
        }
        : {}),
      lds_config: configSource(o.service, o.variant),
      cds_config: configSource(o.service, o.variant),
    },
    static_resources: { clusters: [xdsCluster] },
  };
}

/** The resources of a typical snapshot: listener `ingress` → route `local_route` → cluster `app`. */
export function basicSnapshot(
  o: {
    version: string;
    listenerPort: number;
    appPort: number;
    service: XdsService;
    variant: XdsVariant;
  },
) {
  return {
    version: o.version,
    listeners: [
      httpListener(
        "ingress",
        o.listenerPort,
        hcm("ingress", { rds: "local_route", source: configSource(o.service, o.variant) }),
        { traffic_direction: "INBOUND" },
      ),
    ],
    routes: [route("local_route", o.version)],
    clusters: [appCluster(o.appPort)],
  };
}

/** A GET on a fresh connection (no pool: a draining filter chain can't fail a reused one). */
export function get(
  port: number,
  path: string,
): Promise<
  { status: number; headers: Record<string, string | string[] | undefined>; body: string }
> {
  return new Promise((resolve, reject) => {
    const req = request({
      host: "127.0.0.1",
      port,
      path,
      agent: false,
      headers: { connection: "close" },
    }, (res) => {
      let body = "";
      res.on("data", (chunk) => (body += String(chunk)));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end();
  });
}

/** The filter's gauges in Envoy, summed: requests (HTTP) and connections (TCP variant) in flight now. */
export async function inflightGauge(adminUrl: string): Promise<number> {
  const body = await fetch(
    `${adminUrl}/stats?filter=^wasmcustom\\.lastcall_inflight(_tcp)?(_odd)?$&format=json`,
  ).then((r) => r.json()) as { stats: Array<{ name: string; value: number }> };
  return body.stats.reduce((sum, s) => sum + s.value, 0);
}

/** One counter of Envoy's. */
export async function envoyStat(adminUrl: string, name: string): Promise<number> {
  const body = await fetch(`${adminUrl}/stats?filter=^${name.replaceAll(".", "\\.")}$&format=json`)
    .then((r) => r.json()) as { stats: Array<{ name: string; value: number }> };
  return body.stats.find((s) => s.name === name)?.value ?? 0;
}

/** The http_filters of every HTTP connection manager of a dynamic listener, from Envoy's config dump. */
export async function dumpedHttpFilters(adminUrl: string, listener: string): Promise<Json[][]> {
  const dump = await fetch(`${adminUrl}/config_dump?resource=dynamic_listeners`).then((r) =>
    r.json()
  ) as { configs: Json[] };
  const entry = dump.configs.find((c) => c.name === listener);
  const active = entry?.active_state?.listener as Json | undefined;
  if (!active) return [];
  const chains: Json[] = [
    ...(active.filter_chains ?? []),
    ...(active.default_filter_chain ? [active.default_filter_chain] : []),
  ];
  return chains.flatMap((c) => (c.filters ?? []) as Json[]).filter((f) =>
    f.typed_config?.["@type"] === HCM
  ).map((f) => f.typed_config.http_filters as Json[]);
}
