// The filter inserted into listeners written as JSON/YAML (LDS files): the same places as the
// wire-level rewrite (listener.ts) and as static listeners, on parsed JSON, and an unmarked
// listener marked INBOUND (agent/envoy/direction.ts). Keys lastcall does not know stay as they are.
import { type Counting, countingOf, type Direction, directionOf } from "../envoy/direction.ts";
import { type DeliveryCheck, deliveryOf } from "../envoy/delivery-check.ts";

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json =>
  typeof v === "object" && v !== null && !Array.isArray(v);

const LISTENER_TYPE = "type.googleapis.com/envoy.config.listener.v3.Listener";
const HCM_TYPE =
  "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
const TCP_PROXY_TYPE = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy";

/** What was inserted into one listener. */
export interface JsonListenerRewrite {
  name: string;
  /** Its direction as the file wrote it. */
  direction: Direction;
  /** Whether lastcall marked it INBOUND (it had no direction). */
  marked: boolean;
  /** How it is counted (the filters it got now or already had). */
  counted: Counting;
  /** How its responses' delivery is checked, by its address. */
  delivery: DeliveryCheck;
  /** HTTP connection managers that got the filter. */
  http: number;
  /** Filter chains that got the TCP variant. */
  tcp: number;
}

const typeOf = (
  filter: Json,
) => (isObject(filter.typed_config) ? filter.typed_config["@type"] : undefined);

/** Inserts the filters into one listener (modified in place). */
export function insertIntoListener(
  listener: Json,
  filters: { http: Json; tcp: Json },
): JsonListenerRewrite {
  const direction = directionOf(listener.traffic_direction);
  const outbound = direction === "OUTBOUND";
  const marked = direction === "unmarked";
  if (marked) listener.traffic_direction = "INBOUND";
  const chains = Array.isArray(listener.filter_chains)
    ? listener.filter_chains.filter(isObject)
    : [];
  if (isObject(listener.default_filter_chain)) chains.push(listener.default_filter_chain);
  let http = 0;
  let tcp = 0;
  let httpAfter = 0;
  let tcpAfter = 0;
  for (const chain of chains) {
    const list = Array.isArray(chain.filters) ? chain.filters.filter(isObject) : [];
    const hasHcm = list.some((f) => typeOf(f) === HCM_TYPE);
    const hasTcpProxy = list.some((f) =>
      typeOf(f) === TCP_PROXY_TYPE || f.name === "envoy.filters.network.tcp_proxy"
    );
    const hadTcp = list.some((f) => f.name === filters.tcp.name);
    const addTcp = !outbound && hasTcpProxy && !hasHcm && !hadTcp;
    if (addTcp) {
      chain.filters = [structuredClone(filters.tcp), ...list];
      tcp++;
    }
    if (addTcp || hadTcp) tcpAfter++;
    for (const filter of list) {
      if (typeOf(filter) !== HCM_TYPE) continue;
      httpAfter++;
      const hcm = filter.typed_config as Json;
      const existing = Array.isArray(hcm.http_filters) ? hcm.http_filters : [];
      if (existing.some((f) => isObject(f) && f.name === filters.http.name)) continue;
      hcm.http_filters = [structuredClone(filters.http), ...existing];
      http++;
    }
  }
  const counted = countingOf({ direction, http: httpAfter, tcp: tcpAfter });
  return {
    name: String(listener.name ?? ""),
    direction,
    marked,
    counted,
    delivery: deliveryOf(listener),
    http,
    tcp,
  };
}

/**
 * Inserts the filters into every Listener of a parsed DiscoveryResponse (modified in place).
 *
 * @example
 * ```ts
 * const listeners = insertIntoResponse(YAML.parse(text), plan.filters);
 * ```
 */
export function insertIntoResponse(
  response: unknown,
  filters: { http: Json; tcp: Json },
): JsonListenerRewrite[] {
  if (!isObject(response) || !Array.isArray(response.resources)) return [];
  return response.resources.filter((r) => isObject(r) && r["@type"] === LISTENER_TYPE).map((r) =>
    insertIntoListener(r as Json, filters)
  );
}
