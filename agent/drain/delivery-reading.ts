// What the delivery wait (drainer.ts) reports and how often it looks; its HTTP/2 tail is also
// how long Envoy's delayed close waits (the bootstrap), so both live apart from the wait.
import type { Undelivered } from "../envoy/sockets.ts";

/** What a stop says when no reading could be taken at all. */
export const UNREAD = "kernel send queues and Envoy's buffers (/proc could not be read)";

/**
 * A delivery reading as the stop reports it: the bytes left when every buffer was looked at,
 * else what could not be (never a 0 for what was not seen, nor silence): `unread` when no reading
 * could be taken.
 *
 * @example
 * ```ts
 * deliveryReading({ connections: 1, sending: 0, bytes: 0 }); // { bytesUnsent: 0 }
 * deliveryReading(undefined, "epoch 0: exited"); // { unchecked: ["epoch 0: exited"] }
 * ```
 */
export function deliveryReading(
  left: Undelivered | undefined,
  unread = UNREAD,
): { bytesUnsent?: number; unchecked?: string[] } {
  if (!left) return { unchecked: [unread] };
  return left.unchecked?.length ? { unchecked: left.unchecked } : { bytesUnsent: left.bytes };
}

/** Longest pause between two looks at what Envoy's last responses still have to deliver. */
export const DELIVERY_POLL_MS = 50;
/**
 * How long the delivery wait, once Envoy holds no byte, still waits for the drained HTTP/2
 * connections to close: their clients may be reading what they took (up to a window). Envoy
 * never closes an idle one on a drain, so this bounds what an idle pooled client adds. A
 * hot-restart parent's connections seen carrying bytes are waited for as long: its buffers cannot
 * be read.
 */
export const HTTP2_TAIL_MS = 3000;
