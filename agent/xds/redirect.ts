// Points Envoy's listener source at lastcall (ADS or gRPC to its xDS proxy, a file to a rewritten
// copy), and where the proxy relays to. Pure.

/** The static cluster through which Envoy reaches lastcall's xDS proxy. */
export const XDS_CLUSTER = "lastcall_xds";
/** Metadata Envoy sends with every xDS stream to lastcall: the proxy refuses streams without it. */
export const XDS_TOKEN_HEADER = "x-lastcall-xds-token";

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json =>
  typeof v === "object" && v !== null && !Array.isArray(v);
const GRPC_API_TYPES = new Set(["GRPC", "DELTA_GRPC", "AGGREGATED_GRPC", "AGGREGATED_DELTA_GRPC"]);
const TLS_TYPE = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext";
const RAW_BUFFER_TYPE =
  "type.googleapis.com/envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer";

/** Where the proxy of one Envoy process serves, and where its rewritten files go. */
export interface XdsRedirectOptions {
  /** Unix socket the proxy listens on. */
  socketPath: string;
  /** Secret Envoy sends as {@linkcode XDS_TOKEN_HEADER}. */
  token: string;
  /** Path of the rewritten LDS file, without extension (e.g. `<run dir>/lds-g1-epoch0`). */
  fileBase: string;
}

/** The control plane the proxy relays to, as the bootstrap names it. */
export interface XdsUpstream {
  /** Which config source was redirected. */
  source: "ads" | "lds";
  /** `envoy_grpc` cluster name, or the `google_grpc` target. */
  name: string;
  /** `:authority` Envoy would have sent (the cluster name unless `envoy_grpc.authority`). */
  authority: string;
  /** TCP address or Unix socket. */
  address: { host: string; port: number } | { path: string };
  /** The cluster's UpstreamTlsContext (its `typed_config`), when it uses TLS. */
  tls?: Json;
  /** `google_grpc.channel_credentials.ssl_credentials`, when used. */
  googleSsl?: Json;
}

/** A listener file lastcall rewrites into a copy for Envoy. */
export interface XdsFile {
  /** The user's file (a DiscoveryResponse). */
  source: string;
  /** The copy Envoy reads. */
  copy: string;
  format: "json" | "yaml" | "pb";
}

/** What the proxy of one Envoy process relays, with the filters it inserts. */
export interface XdsPlan {
  socketPath: string;
  token: string;
  upstream?: XdsUpstream;
  files: XdsFile[];
  /** The filter as `wasmFilter()` builds it: HTTP and TCP variants. */
  filters: { http: Json; tcp: Json };
  /** What is relayed, for the `start` event. */
  relayed: string[];
  /** Listener sources lastcall cannot relay (Envoy's stats count their requests). */
  unseen: string[];
}

function addressOf(cluster: Json): XdsUpstream["address"] | string {
  const assignment = isObject(cluster.load_assignment) ? cluster.load_assignment : {};
  const endpoints = Array.isArray(assignment.endpoints) ? assignment.endpoints : [];
  const lb = isObject(endpoints[0]) && Array.isArray(endpoints[0].lb_endpoints)
    ? endpoints[0].lb_endpoints
    : [];
  const endpoint = isObject(lb[0]) && isObject(lb[0].endpoint) ? lb[0].endpoint : {};
  const address = isObject(endpoint.address) ? endpoint.address : {};
  if (isObject(address.pipe) && typeof address.pipe.path === "string") {
    return { path: address.pipe.path };
  }
  const socket = address.socket_address;
  if (isObject(socket) && typeof socket.address === "string" && socket.port_value !== undefined) {
    return { host: socket.address, port: Number(socket.port_value) };
  }
  return "its first endpoint has no socket_address with port_value or pipe";
}

function tlsOf(cluster: Json): Json | undefined | string {
  const socket = cluster.transport_socket;
  if (!isObject(socket)) return undefined;
  const typed = isObject(socket.typed_config) ? socket.typed_config : {};
  if (typed["@type"] === TLS_TYPE) return typed;
  if (typed["@type"] === RAW_BUFFER_TYPE) return undefined;
  return `transport_socket ${String(socket.name)} is not TLS`;
}

/** The upstream of one gRPC service entry, or why it cannot be relayed. */
function upstreamOf(config: Json, source: "ads" | "lds", service: unknown): XdsUpstream | string {
  if (!isObject(service)) return "no grpc_services";
  if (isObject(service.envoy_grpc)) {
    const name = String(service.envoy_grpc.cluster_name ?? "");
    const statics =
      isObject(config.static_resources) && Array.isArray(config.static_resources.clusters)
        ? config.static_resources.clusters
        : [];
    const cluster = statics.find((c) => isObject(c) && c.name === name) as Json | undefined;
    if (!cluster) return `envoy_grpc cluster ${name} is not a static cluster`;
    const address = addressOf(cluster);
    if (typeof address === "string") return `cluster ${name}: ${address}`;
    const tls = tlsOf(cluster);
    if (typeof tls === "string") return `cluster ${name}: ${tls}`;
    const authority =
      typeof service.envoy_grpc.authority === "string" && service.envoy_grpc.authority !== ""
        ? service.envoy_grpc.authority
        : name;
    return { source, name, authority, address, ...(tls ? { tls } : {}) };
  }
  if (isObject(service.google_grpc)) {
    const g = service.google_grpc;
    const target = String(g.target_uri ?? "");
    const match = /^(?:dns:(?:\/\/\/)?)?\[?([^\]]+?)\]?:(\d+)$/.exec(target);
    if (!match) return `google_grpc target_uri ${target} is not host:port`;
    if (g.call_credentials !== undefined) return "google_grpc call_credentials are not supported";
    const credentials = isObject(g.channel_credentials) ? g.channel_credentials : {};
    if (Object.keys(credentials).some((k) => k !== "ssl_credentials")) {
      return "google_grpc channel_credentials other than ssl_credentials are not supported";
    }
    return {
      source,
      name: target,
      authority: target,
      address: { host: match[1], port: Number(match[2]) },
      ...(isObject(credentials.ssl_credentials) ? { googleSsl: credentials.ssl_credentials } : {}),
    };
  }
  return "the gRPC service is neither envoy_grpc nor google_grpc";
}

/** The grpc_services entry that sends the stream to lastcall; the original's other settings stay. */
function toProxy(service: Json, token: string): Json {
  const { envoy_grpc: _e, google_grpc: _g, ...rest } = service;
  const metadata = Array.isArray(service.initial_metadata) ? service.initial_metadata : [];
  return {
    ...rest,
    envoy_grpc: { cluster_name: XDS_CLUSTER },
    initial_metadata: [...metadata, { key: XDS_TOKEN_HEADER, value: token }],
  };
}

function redirectApi(
  config: Json,
  api: Json,
  source: "ads" | "lds",
  options: XdsRedirectOptions,
  plan: XdsPlan,
  what: string,
): void {
  if (!GRPC_API_TYPES.has(String(api.api_type))) {
    plan.unseen.push(`${what} (api_type ${String(api.api_type)})`);
    return;
  }
  const services = Array.isArray(api.grpc_services) ? api.grpc_services : [];
  const upstream = upstreamOf(config, source, services[0]);
  if (typeof upstream === "string") {
    plan.unseen.push(`${what} (${upstream})`);
    return;
  }
  api.grpc_services = [toProxy(services[0] as Json, options.token)];
  plan.upstream = upstream;
  plan.relayed.push(what);
}

function fileFormat(path: string): XdsFile["format"] | undefined {
  if (/\.json$/i.test(path)) return "json";
  if (/\.ya?ml$/i.test(path)) return "yaml";
  if (/\.pb$/i.test(path)) return "pb";
  return undefined;
}

/**
 * Redirects the listener source of a bootstrap (modified in place) to lastcall; returns the
 * plan, or undefined when the bootstrap has no `dynamic_resources.lds_config`.
 *
 * @example
 * ```ts
 * const plan = redirectXds(config, { socketPath, token, fileBase }, { http: wasmFilter(f), tcp: wasmFilter(f, true) });
 * ```
 * @throws {Error} when the bootstrap already has a cluster named {@linkcode XDS_CLUSTER}
 */
export function redirectXds(
  config: Json,
  options: XdsRedirectOptions,
  filters: XdsPlan["filters"],
): XdsPlan | undefined {
  const dynamic = config.dynamic_resources;
  if (!isObject(dynamic) || !isObject(dynamic.lds_config)) return undefined;
  const lds = dynamic.lds_config;
  const plan: XdsPlan = {
    socketPath: options.socketPath,
    token: options.token,
    files: [],
    filters,
    relayed: [],
    unseen: [],
  };
  if (isObject(lds.ads)) {
    if (isObject(dynamic.ads_config)) {
      redirectApi(
        config,
        dynamic.ads_config,
        "ads",
        options,
        plan,
        "LDS over ADS (dynamic_resources.ads_config)",
      );
    } else plan.unseen.push("LDS over ADS (no ads_config)");
  } else if (isObject(lds.api_config_source)) {
    redirectApi(
      config,
      lds.api_config_source,
      "lds",
      options,
      plan,
      "LDS (dynamic_resources.lds_config.api_config_source)",
    );
  } else if (isObject(lds.path_config_source) || typeof lds.path === "string") {
    const source = isObject(lds.path_config_source)
      ? String(lds.path_config_source.path ?? "")
      : String(lds.path);
    const format = fileFormat(source);
    if (!format) {
      plan.unseen.push(`LDS file ${source} (only .json, .yaml and .pb files are rewritten)`);
    } else {
      const copy = `${options.fileBase}.${format === "pb" ? "pb" : "json"}`;
      plan.files.push({ source, copy, format: format });
      // Envoy watches the copy's own moves: lastcall renames each new version into place.
      delete lds.path;
      lds.path_config_source = { path: copy };
      plan.relayed.push(`LDS file ${source}`);
    }
  } else {
    plan.unseen.push("LDS (dynamic_resources.lds_config)");
  }
  if (plan.upstream) {
    const resources = (config.static_resources ??= {}) as Json;
    const clusters = (resources.clusters ??= []) as Json[];
    if (clusters.some((c) => c.name === XDS_CLUSTER)) {
      throw new Error(`Envoy config already has a cluster named ${XDS_CLUSTER}`);
    }
    clusters.push({
      name: XDS_CLUSTER,
      type: "STATIC",
      connect_timeout: "1s",
      load_assignment: {
        cluster_name: XDS_CLUSTER,
        endpoints: [{
          lb_endpoints: [{ endpoint: { address: { pipe: { path: options.socketPath } } } }],
        }],
      },
      typed_extension_protocol_options: {
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
          "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
          explicit_http_config: { http2_protocol_options: {} },
        },
      },
    });
  }
  return plan;
}
