// A listener's traffic direction as lastcall treats it and how its requests are counted, for static
// and LDS listeners alike.
import type { DeliveryCheck } from "./delivery-check.ts";

/** `traffic_direction` as written: INBOUND, OUTBOUND, or absent (UNSPECIFIED). */
export type Direction = "INBOUND" | "OUTBOUND" | "unmarked";

/** Values of `envoy.config.core.v3.TrafficDirection` on the wire. */
export const TRAFFIC_DIRECTION = { UNSPECIFIED: 0, INBOUND: 1, OUTBOUND: 2 } as const;

/**
 * How lastcall counts a listener's requests:
 * - `filter`: the in-flight filter in its HTTP connection managers (drained as INBOUND);
 * - `filter_tcp`: the TCP variant before its tcp_proxy, counting open connections;
 * - `filter+filter_tcp`: both, in different filter chains;
 * - `filter_outbound`: an OUTBOUND listener's HTTP connection managers: counted, not drained;
 * - `stats`: no filter (`--no-filter`): Envoy's `downstream_rq_active` of its connection managers;
 * - `not_counted`: nothing lastcall can count (an OUTBOUND tcp_proxy, another network filter).
 */
export type Counting =
  | "filter"
  | "filter_tcp"
  | "filter+filter_tcp"
  | "filter_outbound"
  | "stats"
  | "not_counted";

/** One listener in the `start`, `epoch` and `xds_listeners` events. */
export interface ListenerCounting {
  name: string;
  direction: Direction;
  counted: Counting;
  /** How its responses' delivery is checked (delivery-check.ts); absent where its address was not read. */
  delivery?: DeliveryCheck;
}

/**
 * The direction of a listener from its JSON `traffic_direction` (a name, or the enum's number).
 *
 * @example
 * ```ts
 * directionOf("OUTBOUND"); // "OUTBOUND"
 * directionOf(undefined);  // "unmarked"
 * ```
 */
export function directionOf(value: unknown): Direction {
  if (value === "OUTBOUND" || value === TRAFFIC_DIRECTION.OUTBOUND) return "OUTBOUND";
  if (value === "INBOUND" || value === TRAFFIC_DIRECTION.INBOUND) return "INBOUND";
  return "unmarked";
}

/** What a listener got, to name how it is counted. */
export interface CountingInput {
  direction: Direction;
  /** Connection managers with the filter (inserted now or already there). */
  http: number;
  /** Filter chains with the TCP variant (inserted now or already there). */
  tcp: number;
  /** Connection managers whose `downstream_rq_active` lastcall counts without a filter. */
  statsOnly?: number;
}

/**
 * How a listener is counted, from what it got.
 *
 * @example
 * ```ts
 * countingOf({ direction: "unmarked", http: 1, tcp: 0 }); // "filter"
 * ```
 */
export function countingOf(input: CountingInput): Counting {
  if (input.http > 0 && input.direction === "OUTBOUND") return "filter_outbound";
  if (input.http > 0 && input.tcp > 0) return "filter+filter_tcp";
  if (input.http > 0) return "filter";
  if (input.tcp > 0) return "filter_tcp";
  if ((input.statsOnly ?? 0) > 0 && input.direction !== "OUTBOUND") return "stats";
  return "not_counted";
}
