// The user's Envoy config in, the effective bootstrap out: admin on loopback, a cluster to the
// agent, the in-flight filter in every listener. Pure.
import { redirectXds, type XdsPlan, type XdsRedirectOptions } from "../xds/redirect.ts";
import { addIdleClose } from "./idle-close.ts";
import { countingOf, type Direction, directionOf, type ListenerCounting } from "./direction.ts";
import { deliveryOf } from "./delivery-check.ts";

/** Timeout of the filter's report calls: longer than the longest heartbeat hold (the agent's long poll). */
export function reportTimeoutMs(heartbeatMs: number): number {
  return heartbeatMs + 1000;
}

/** The agent cluster's name, also the filter's `agent_cluster`. */
export const AGENT_CLUSTER = "lastcall_agent";
/** The filter's name, root id and VM id in Envoy. */
export const FILTER_NAME = "lastcall_inflight";

const HCM_TYPE =
  "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
const WASM_TYPE = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm";
const NETWORK_WASM_TYPE = "type.googleapis.com/envoy.extensions.filters.network.wasm.v3.Wasm";
const TCP_PROXY_TYPE = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy";
/** Suffix of the reporting instance of the TCP variant: its own counter, its own sequence. */
export const TCP_INSTANCE_SUFFIX = "/tcp";
/** The TCP variant's gauge (the HTTP one keeps the filter's default, `lastcall_inflight`). */
export const TCP_GAUGE = "lastcall_inflight_tcp";

/** Options of {@linkcode deriveBootstrap}. */
export interface BootstrapOptions {
  /** Admin port on 127.0.0.1 (0: any). */
  adminPort: number;
  /** Serve admin on this Unix socket instead, when the config has no admin. */
  adminSocket?: string;
  /** Where the agent's status server listens, for the filter's reports. */
  statusAddress: string;
  statusPort: number;
  /** The filter to insert, or undefined for `--no-filter`. */
  filter?: {
    /** Path of filter.wasm. */
    wasmPath: string;
    /** Plugin configuration (see docs/filter-protocol.md). */
    pluginConfig: Record<string, unknown>;
  };
  /** xDS proxy of this Envoy (agent/xds/): LDS is redirected there, when there is a filter. */
  xds?: XdsRedirectOptions;
  /** This Envoy's pressure file: its idle connections close once it reads 1 (idle-close.ts). */
  idlePressureFile?: string;
  /**
   * `delayed_close_timeout` for inbound connection managers that leave it unset (Envoy's 1 s):
   * how long a connection Envoy closes stays open for a client still reading, until it closes.
   */
  delayedCloseMs?: number;
}

/** The effective bootstrap and what lastcall learned from it. */
export interface Bootstrap {
  /** The config to hand to Envoy. */
  config: Record<string, unknown>;
  /** Names of the listeners treated as inbound: every one not marked OUTBOUND. */
  inboundListeners: string[];
  /** Every static listener: its direction as written and how lastcall counts it. */
  listeners: ListenerCounting[];
  /** `stat_prefix` of every HTTP connection manager of those listeners. */
  inboundStatPrefixes: string[];
  /** Stat prefixes of the connection managers the filter is in (inbound and outbound): its gauge counts them. */
  filteredStatPrefixes: string[];
  /** Inbound listeners whose HTTP connection managers got the filter. */
  filteredListeners: string[];
  /** OUTBOUND listeners whose HTTP connection managers got the filter: counted, not drained. */
  outboundListeners: string[];
  /** Inbound tcp_proxy listeners that got the network (connection-counting) variant. */
  tcpListeners: string[];
  /**
   * Listeners lastcall cannot rewrite (LDS), whose requests only Envoy's stats can count: the
   * drain then counts every connection manager's `downstream_rq_active`, not a prefix set.
   */
  unseenListeners: string[];
  /** What lastcall's xDS proxy relays for this Envoy (agent/xds/), when LDS is redirected. */
  xds?: XdsPlan;
  /** The pressure file that closes its idle connections (idle-close.ts), or why there is none. */
  idleClose?: { file: string } | { unavailable: string };
}

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json =>
  typeof v === "object" && v !== null && !Array.isArray(v);
const LOOPBACK = new Set(["127.0.0.1", "localhost", "::1"]);

/** Refuses a config that lastcall cannot run, naming what is wrong. */
export class BootstrapError extends Error {
  override name = "BootstrapError";
}

function isHcm(filter: Json): boolean {
  const typed = filter.typed_config;
  return filter.name === "envoy.filters.network.http_connection_manager" ||
    (isObject(typed) && typed["@type"] === HCM_TYPE);
}

function isTcpProxy(filter: Json): boolean {
  const typed = filter.typed_config;
  return filter.name === "envoy.filters.network.tcp_proxy" ||
    (isObject(typed) && typed["@type"] === TCP_PROXY_TYPE);
}

/**
 * Gives a connection manager that leaves `delayed_close_timeout` unset the given one. Envoy closes
 * a drained HTTP/2 connection after its last stream; with its 1 s default a client still reading
 * what it took meets a closed socket (its WINDOW_UPDATEs draw a reset) and may drop the rest.
 */
function withDelayedClose(hcm: Json, ms: number | undefined): void {
  if (ms === undefined || hcm.delayed_close_timeout !== undefined) return;
  hcm.delayed_close_timeout = `${ms / 1000}s`;
}

/**
 * `filters` with lastcall's filter first, or in place of one of the same name that the config
 * already has (copied from docs/filter.md): a chain with it twice would count each request
 * twice, and only lastcall's own carries this run's report address and token.
 */
function withOwnFilter(filters: Json[], own: Json): Json[] {
  const at = filters.findIndex((f) => f.name === own.name);
  return at < 0 ? [own, ...filters] : filters.map((f, i) => (i === at ? own : f));
}

/**
 * The filter as an HTTP filter, or (`tcp`) as a network filter counting connections. The TCP
 * variant has its own VM id, hence its own VMs, counts in its own gauge (`lastcall_inflight_tcp`)
 * and reports as `<instance>/tcp`.
 */
export function wasmFilter(filter: NonNullable<BootstrapOptions["filter"]>, tcp = false): Json {
  const pluginConfig = tcp
    ? {
      ...filter.pluginConfig,
      instance: `${String(filter.pluginConfig.instance ?? "")}${TCP_INSTANCE_SUFFIX}`,
      gauge: TCP_GAUGE,
    }
    : filter.pluginConfig;
  return {
    name: tcp ? `${FILTER_NAME}_tcp` : FILTER_NAME,
    typed_config: {
      "@type": tcp ? NETWORK_WASM_TYPE : WASM_TYPE,
      config: {
        name: FILTER_NAME,
        root_id: FILTER_NAME,
        vm_config: {
          vm_id: tcp ? `${FILTER_NAME}_tcp` : FILTER_NAME,
          runtime: "envoy.wasm.runtime.v8",
          code: { local: { filename: filter.wasmPath } },
        },
        configuration: {
          "@type": "type.googleapis.com/google.protobuf.StringValue",
          value: JSON.stringify(pluginConfig),
        },
        // A broken filter must never turn into 503s for users: requests pass, and the agent
        // notices the silence (no heartbeat) and falls back to Envoy's own counters.
        failure_policy: "FAIL_OPEN",
      },
    },
  };
}

function checkAdmin(config: Json, adminPort: number, adminSocket?: string): void {
  const admin = config.admin;
  if (admin === undefined) {
    config.admin = adminSocket
      ? { address: { pipe: { path: adminSocket } } }
      : { address: { socket_address: { address: "127.0.0.1", port_value: adminPort } } };
    return;
  }
  const address = isObject(admin) && isObject(admin.address) ? admin.address : undefined;
  // A Unix socket (Contour's bootstraps use /admin/admin.sock) is reachable from the pod only.
  if (address && isObject(address.pipe) && typeof address.pipe.path === "string") return;
  const socket = address?.socket_address;
  if (!isObject(socket)) {
    throw new BootstrapError(
      "Envoy config admin has neither socket_address nor pipe: lastcall needs admin on 127.0.0.1 or a Unix socket",
    );
  }
  if (!LOOPBACK.has(String(socket.address))) {
    throw new BootstrapError(
      `Envoy config admin address must be loopback, not ${String(socket.address)}`,
    );
  }
  if (Number(socket.port_value ?? 0) !== adminPort) {
    throw new BootstrapError(
      `Envoy config admin port ${String(socket.port_value)} differs from --admin-port ${adminPort}`,
    );
  }
}

/**
 * Derives the effective bootstrap from the user's parsed Envoy config. Nothing else in the
 * user's config changes; the input is not modified.
 *
 * @example
 * ```ts
 * const { config } = deriveBootstrap(YAML.parse(text), { adminPort: 15000, statusAddress: "127.0.0.1", statusPort: 15020 });
 * ```
 * @throws {BootstrapError} when the config is not an object, admin is not loopback, or a name is taken
 */
export function deriveBootstrap(userConfig: unknown, options: BootstrapOptions): Bootstrap {
  if (!isObject(userConfig)) throw new BootstrapError("Envoy config must be a YAML or JSON object");
  const config = structuredClone(userConfig) as Json;
  checkAdmin(config, options.adminPort, options.adminSocket);

  const staticResources = (config.static_resources ??= {}) as Json;
  const clusters = (staticResources.clusters ??= []) as Json[];
  if (clusters.some((c) => c.name === AGENT_CLUSTER)) {
    throw new BootstrapError(`Envoy config already has a cluster named ${AGENT_CLUSTER}`);
  }
  clusters.push({
    name: AGENT_CLUSTER,
    type: "STATIC",
    connect_timeout: "1s",
    load_assignment: {
      cluster_name: AGENT_CLUSTER,
      endpoints: [{
        lb_endpoints: [{
          endpoint: {
            address: {
              socket_address: { address: options.statusAddress, port_value: options.statusPort },
            },
          },
        }],
      }],
    },
  });

  const listeners = ((staticResources.listeners ?? []) as Json[]).filter(isObject);
  const directions = new Map<Json, Direction>(
    listeners.map((l) => [l, directionOf(l.traffic_direction)]),
  );
  // Every listener is counted unless it is explicitly OUTBOUND. An unmarked one is marked
  // INBOUND in lastcall's copy: Envoy's `drain_listeners?inboundonly` drains only listeners
  // marked INBOUND, and one lastcall waits for must be drained like the others (for Envoy,
  // UNSPECIFIED and INBOUND differ in nothing else: tracing names both "ingress").
  const inbound = listeners.filter((l) => directions.get(l) !== "OUTBOUND");
  for (const l of inbound) if (directions.get(l) === "unmarked") l.traffic_direction = "INBOUND";
  // Outbound listeners (the app's calls out) are counted, not drained: an app that shuts down
  // slowly still calls other services through Envoy, and the drain waits for those calls.
  const outbound = listeners.filter((l) => directions.get(l) === "OUTBOUND");
  const inboundStatPrefixes: string[] = [];
  const filteredStatPrefixes: string[] = [];
  const filteredListeners: string[] = [];
  const outboundListeners: string[] = [];
  const tcpListeners = new Set<string>();
  const counting = new Map<Json, ListenerCounting>();
  for (const listener of [...inbound, ...outbound]) {
    const isInbound = inbound.includes(listener);
    const name = String(listener.name ?? "(unnamed)");
    let http = 0;
    let tcp = 0;
    let statsOnly = 0;
    const chains = [...((listener.filter_chains ?? []) as Json[])];
    // A listener may have only a default chain, or a default chain beside matched ones: it
    // carries requests like any other chain.
    if (isObject(listener.default_filter_chain)) chains.push(listener.default_filter_chain);
    for (const chain of chains) {
      const filters = (chain.filters ?? []) as Json[];
      // Open connections are counted on inbound tcp_proxy only: an app's idle outbound pools
      // (databases) would hold every drain until the deadline.
      if (isInbound && options.filter && filters.some(isTcpProxy) && !filters.some(isHcm)) {
        chain.filters = withOwnFilter(filters, wasmFilter(options.filter, true));
        tcpListeners.add(name);
        tcp++;
      }
      for (const filter of filters) {
        if (!isHcm(filter) || !isObject(filter.typed_config)) continue;
        const hcm = filter.typed_config;
        if (isInbound && typeof hcm.stat_prefix === "string") {
          inboundStatPrefixes.push(hcm.stat_prefix);
        }
        if (isInbound) withDelayedClose(hcm, options.delayedCloseMs);
        if (!options.filter) {
          statsOnly++;
          continue;
        }
        hcm.http_filters = withOwnFilter(
          (hcm.http_filters ?? []) as Json[],
          wasmFilter(options.filter),
        );
        if (typeof hcm.stat_prefix === "string") filteredStatPrefixes.push(hcm.stat_prefix);
        http++;
      }
    }
    if (http > 0) (isInbound ? filteredListeners : outboundListeners).push(name);
    const counted = countingOf({ direction: directions.get(listener)!, http, tcp, statsOnly });
    counting.set(listener, {
      name,
      direction: directions.get(listener)!,
      counted,
      delivery: deliveryOf(listener),
    });
  }
  // xDS hook (agent/xds/redirect.ts): LDS goes through lastcall, which inserts the filter.
  const xds = options.filter && options.xds
    ? redirectXds(config, options.xds, {
      http: wasmFilter(options.filter),
      tcp: wasmFilter(options.filter, true),
    })
    : undefined;
  const pressureFile = options.idlePressureFile;
  const idleTaken = pressureFile ? addIdleClose(config, pressureFile) : undefined;
  const idleClose = pressureFile
    ? (idleTaken ? { unavailable: idleTaken } : { file: pressureFile })
    : undefined;
  const dynamic = isObject(config.dynamic_resources) ? config.dynamic_resources : {};
  const unseenListeners = xds
    ? xds.unseen
    : dynamic.lds_config !== undefined
    ? ["LDS (dynamic_resources.lds_config)"]
    : [];
  return {
    config,
    unseenListeners,
    inboundListeners: inbound.map((l) => String(l.name ?? "(unnamed)")),
    listeners: listeners.map((l) => counting.get(l)!),
    inboundStatPrefixes,
    filteredStatPrefixes,
    filteredListeners,
    outboundListeners,
    tcpListeners: [...tcpListeners],
    ...(xds ? { xds } : {}),
    ...(idleClose ? { idleClose } : {}),
  };
}
