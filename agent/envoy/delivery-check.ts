// How the drain can tell that a listener's responses reached their clients, by the kind of
// socket it listens on: the one rule behind `listeners[].delivery` in `start`, `epoch` and
// `xds_listeners` (docs/reliability.md, "Delivery by listener kind").

/**
 * - `tcp_queue`: TCP; the kernel's send queue of each accepted connection (empty: every byte
 *   acknowledged by the client), and Envoy's own buffers from its stats (HTTP/2 bytes waiting
 *   for a client's window, connection write buffers);
 * - `envoy_buffers`: a unix socket (or Envoy-internal); Envoy's own buffers from its stats. What
 *   Envoy wrote into a unix socket is already in the client's receive queue and outlives Envoy;
 * - `unchecked`: UDP (HTTP/3 over QUIC): what QUIC still has to send or resend is in no stat
 *   nor kernel queue; a stop with QUIC connections open says so (`delivery_unchecked`).
 */
export type DeliveryCheck = "tcp_queue" | "envoy_buffers" | "unchecked";

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json =>
  typeof v === "object" && v !== null && !Array.isArray(v);
const RANK: Record<DeliveryCheck, number> = { tcp_queue: 0, envoy_buffers: 1, unchecked: 2 };

function checkOfAddress(address: unknown): DeliveryCheck {
  if (!isObject(address)) return "tcp_queue";
  if (isObject(address.pipe) || isObject(address.envoy_internal_address)) return "envoy_buffers";
  const socket = address.socket_address;
  return isObject(socket) && (socket.protocol === "UDP" || socket.protocol === 1)
    ? "unchecked"
    : "tcp_queue";
}

/**
 * How the delivery of a listener's responses is checked, from its JSON: the weakest check of its
 * addresses (`address`, `additional_addresses`); a `udp_listener_config` means UDP.
 *
 * @example
 * ```ts
 * deliveryOf({ address: { pipe: { path: "/run/app.sock" } } }); // "envoy_buffers"
 * ```
 */
export function deliveryOf(listener: Json): DeliveryCheck {
  if (isObject(listener.udp_listener_config)) return "unchecked";
  const extra = Array.isArray(listener.additional_addresses) ? listener.additional_addresses : [];
  const checks = [listener.address, ...extra.map((a) => (isObject(a) ? a.address : undefined))].map(
    checkOfAddress,
  );
  return checks.reduce((worst, c) => (RANK[c] > RANK[worst] ? c : worst), "tcp_queue");
}
