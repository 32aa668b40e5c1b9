// Inserts the filter into one Listener at the wire level, copying every other byte as it came.
import {
  type Counting,
  countingOf,
  type Direction,
  TRAFFIC_DIRECTION,
} from "../envoy/direction.ts";
import { type DeliveryCheck, deliveryOf } from "../envoy/delivery-check.ts";
import {
  concat,
  lenField,
  readFields,
  stringOf,
  varintField,
  WIRE,
  type WireField,
} from "./wire.ts";

const HCM_TYPE =
  "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
const TCP_PROXY_TYPE = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy";

/** Field numbers of Envoy's API used here (envoy/config/listener/v3, http_connection_manager/v3). */
const F = {
  listener: {
    name: 1,
    address: 2,
    filterChains: 3,
    trafficDirection: 16,
    udpListenerConfig: 18,
    defaultFilterChain: 25,
    additionalAddresses: 33,
  },
  additionalAddress: { address: 1 },
  address: { socketAddress: 1, pipe: 2, envoyInternalAddress: 3 },
  socketAddress: { protocol: 1 },
  chain: { filters: 3 },
  filter: { name: 1, typedConfig: 4 },
  any: { typeUrl: 1, value: 2 },
  hcm: { httpFilters: 5 },
  httpFilter: { name: 1 },
} as const;

/** The encoded filters to insert, and their names (to see that a listener already has them). */
export interface EncodedFilters {
  /** An HttpFilter message. */
  http: Uint8Array;
  httpName: string;
  /** A listener Filter message (the network variant). */
  tcp: Uint8Array;
  tcpName: string;
}

/** What rewriting one listener did. */
export interface ListenerRewrite {
  /** The listener to send: the input itself when nothing was inserted or marked. */
  bytes: Uint8Array;
  name: string;
  outbound: boolean;
  /** Its direction as the control plane sent it. */
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

function isLen(field: WireField, number: number): boolean {
  return field.number === number && field.wireType === WIRE.len;
}

/** The type URL and payload of an Any, with the Any's own fields. */
function readAny(bytes: Uint8Array): { typeUrl: string; value?: WireField; fields: WireField[] } {
  const fields = readFields(bytes);
  return {
    typeUrl: stringOf(fields, F.any.typeUrl) ?? "",
    value: fields.find((f) => isLen(f, F.any.value)),
    fields,
  };
}

/** The Any with its value replaced; its other fields are kept in place. */
function withAnyValue(fields: WireField[], value: Uint8Array): Uint8Array {
  return concat(fields.map((f) => (isLen(f, F.any.value) ? lenField(F.any.value, value) : f.raw)));
}

/** Inserts `http` before the first http filter; undefined when the HCM already has it. */
function rewriteHcm(bytes: Uint8Array, filters: EncodedFilters): Uint8Array | undefined {
  const fields = readFields(bytes);
  const existing = fields.filter((f) => isLen(f, F.hcm.httpFilters));
  if (existing.some((f) => stringOf(readFields(f.value), F.httpFilter.name) === filters.httpName)) {
    return undefined;
  }
  const entry = lenField(F.hcm.httpFilters, filters.http);
  if (existing.length === 0) return concat([bytes, entry]);
  return concat(fields.map((f) => (f === existing[0] ? concat([entry, f.raw]) : f.raw)));
}

interface ChainRewrite {
  bytes: Uint8Array;
  http: number;
  tcp: number;
  /** Connection managers and chains with the filter after the rewrite (inserted or already there). */
  httpAfter: number;
  tcpAfter: number;
}

function rewriteChain(bytes: Uint8Array, filters: EncodedFilters, outbound: boolean): ChainRewrite {
  const fields = readFields(bytes);
  const filterFields = fields.filter((f) => isLen(f, F.chain.filters));
  const parsed = filterFields.map((f) => {
    const own = readFields(f.value);
    const typed = own.find((g) => isLen(g, F.filter.typedConfig));
    return {
      field: f,
      own,
      name: stringOf(own, F.filter.name) ?? "",
      any: typed ? readAny(typed.value) : undefined,
    };
  });
  const hasHcm = parsed.some((p) => p.any?.typeUrl === HCM_TYPE);
  const hasTcpProxy = parsed.some((p) =>
    p.any?.typeUrl === TCP_PROXY_TYPE || p.name === "envoy.filters.network.tcp_proxy"
  );
  // Open connections are counted on inbound tcp_proxy only: an app's idle outbound pools would
  // hold every drain until the deadline (as for static listeners).
  const hadTcp = parsed.some((p) => p.name === filters.tcpName);
  const addTcp = !outbound && hasTcpProxy && !hasHcm && !hadTcp;
  let http = 0;
  let httpAfter = 0;
  const replaced = new Map<WireField, Uint8Array>();
  for (const p of parsed) {
    if (p.any?.typeUrl !== HCM_TYPE || !p.any.value) continue;
    httpAfter++;
    const hcm = rewriteHcm(p.any.value.value, filters);
    if (!hcm) continue;
    const any = withAnyValue(p.any.fields, hcm);
    replaced.set(
      p.field,
      lenField(
        F.chain.filters,
        concat(
          p.own.map((
            g,
          ) => (isLen(g, F.filter.typedConfig) ? lenField(F.filter.typedConfig, any) : g.raw)),
        ),
      ),
    );
    http++;
  }
  const tcpAfter = addTcp || hadTcp ? 1 : 0;
  if (http === 0 && !addTcp) return { bytes, http: 0, tcp: 0, httpAfter, tcpAfter };
  const tcpEntry = lenField(F.chain.filters, filters.tcp);
  const out = fields.map((f) => {
    const body = replaced.get(f) ?? f.raw;
    return addTcp && f === filterFields[0] ? concat([tcpEntry, body]) : body;
  });
  return { bytes: concat(out), http, tcp: addTcp ? 1 : 0, httpAfter, tcpAfter };
}

/** The direction a Listener's fields say (the last `traffic_direction` wins, as in protobuf). */
function directionOfFields(fields: WireField[]): Direction {
  const value = fields.filter((f) =>
    f.number === F.listener.trafficDirection && f.wireType === WIRE.varint
  ).at(-1)?.varint;
  return value === TRAFFIC_DIRECTION.OUTBOUND
    ? "OUTBOUND"
    : value === TRAFFIC_DIRECTION.INBOUND
    ? "INBOUND"
    : "unmarked";
}

/** An encoded `envoy.config.core.v3.Address` as the JSON {@linkcode deliveryOf} reads. */
function addressJson(bytes: Uint8Array | undefined): Record<string, unknown> | undefined {
  if (!bytes) return undefined;
  const fields = readFields(bytes);
  if (fields.some((f) => isLen(f, F.address.pipe))) return { pipe: {} };
  if (fields.some((f) => isLen(f, F.address.envoyInternalAddress))) {
    return { envoy_internal_address: {} };
  }
  const socket = fields.find((f) => isLen(f, F.address.socketAddress));
  if (!socket) return undefined;
  const protocol = readFields(socket.value).filter((f) =>
    f.number === F.socketAddress.protocol && f.wireType === WIRE.varint
  ).at(-1)?.varint;
  return { socket_address: { protocol: protocol ?? 0 } };
}

/** How a Listener's delivery is checked, from its encoded address fields. */
function deliveryOfFields(fields: WireField[]): DeliveryCheck {
  return deliveryOf({
    address: addressJson(fields.filter((f) => isLen(f, F.listener.address)).at(-1)?.value),
    additional_addresses: fields.filter((f) => isLen(f, F.listener.additionalAddresses))
      .map((f) => ({
        address: addressJson(
          readFields(f.value).find((g) => isLen(g, F.additionalAddress.address))?.value,
        ),
      })),
    ...(fields.some((f) => isLen(f, F.listener.udpListenerConfig))
      ? { udp_listener_config: {} }
      : {}),
  });
}

/**
 * Inserts the filter into every filter chain of an encoded `envoy.config.listener.v3.Listener`,
 * and marks an unmarked listener INBOUND.
 *
 * @example
 * ```ts
 * const { bytes, http } = rewriteListener(any.value, filters);
 * ```
 * @throws {WireError} when the listener is not well-formed protobuf
 */
export function rewriteListener(bytes: Uint8Array, filters: EncodedFilters): ListenerRewrite {
  const fields = readFields(bytes);
  const name = stringOf(fields, F.listener.name) ?? "";
  const direction = directionOfFields(fields);
  const outbound = direction === "OUTBOUND";
  const marked = direction === "unmarked";
  let http = 0;
  let tcp = 0;
  let httpAfter = 0;
  let tcpAfter = 0;
  const out = fields.map((f) => {
    if (!isLen(f, F.listener.filterChains) && !isLen(f, F.listener.defaultFilterChain)) {
      return f.raw;
    }
    const chain = rewriteChain(f.value, filters, outbound);
    http += chain.http;
    tcp += chain.tcp;
    httpAfter += chain.httpAfter;
    tcpAfter += chain.tcpAfter;
    return chain.bytes === f.value ? f.raw : lenField(f.number, chain.bytes);
  });
  if (marked) out.push(varintField(F.listener.trafficDirection, TRAFFIC_DIRECTION.INBOUND));
  const counted = countingOf({ direction, http: httpAfter, tcp: tcpAfter });
  const delivery = deliveryOfFields(fields);
  return {
    bytes: http + tcp > 0 || marked ? concat(out) : bytes,
    name,
    outbound,
    direction,
    marked,
    counted,
    delivery,
    http,
    tcp,
  };
}
