// Whether a caller is inside the pod: the peer address of the socket is loopback (never a header
// the caller writes). See docs/architecture.md.
import { getConnInfo } from "@hono/node-server/conninfo";
import type { Context, MiddlewareHandler } from "hono";
import { isIPv4 } from "node:net";

/**
 * Whether `address` is a loopback address: 127.0.0.0/8, `::1`, or 127.x.x.x mapped into IPv6
 * (`::ffff:127.0.0.1`, what a dual-stack socket reports). These are the forms sockets report;
 * any other spelling, and an unknown address, counts as not loopback.
 *
 * @param address A peer address as sockets report it
 * @returns True only for a loopback address
 * @example
 * ```ts
 * isLoopbackAddress("::ffff:127.0.0.1"); // true
 * isLoopbackAddress("10.0.0.7"); // false
 * ```
 */
export function isLoopbackAddress(address: string | undefined): boolean {
  if (address === undefined) return false;
  const lower = address.toLowerCase();
  if (lower === "::1") return true;
  const v4 = lower.startsWith("::ffff:") ? lower.slice("::ffff:".length) : lower;
  return isIPv4(v4) && v4.startsWith("127.");
}

/**
 * The address of the peer of the connection the request came on, or undefined when there is
 * no socket (`app.request()` in tests) or the runtime does not say.
 *
 * @param c The request's context
 * @returns The peer address as the socket reports it
 */
export function peerAddress(c: Context): string | undefined {
  try {
    return getConnInfo(c).remote.address;
  } catch {
    return undefined;
  }
}

/**
 * Middleware that answers 403 to callers that are not on loopback, naming the route and the
 * peer, and lets loopback callers through.
 *
 * @returns The middleware
 * @example
 * ```ts
 * app.post("/quitquitquit", loopbackOnly(), (c) => c.json({ quitting: true }));
 * ```
 */
export function loopbackOnly(): MiddlewareHandler {
  return async function loopbackOnly(c, next) {
    const peer = peerAddress(c);
    if (!isLoopbackAddress(peer)) {
      const from = peer === undefined ? "an unknown address" : peer;
      return c.json({
        error: `${c.req.method} ${c.req.path} is accepted only from loopback, not from ${from}`,
      }, 403);
    }
    await next();
  };
}
