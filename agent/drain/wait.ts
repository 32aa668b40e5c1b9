// The drain's wait: by mode until the drain may end, then until every response byte is
// delivered, within the deadline. The drainer (drainer.ts) runs it for the termination and
// `POST /drain`; reloads' old epochs (old-epochs.ts) run it for their parents.
import { delay } from "../lib/async.ts";
import { DELIVERY_POLL_MS, deliveryReading, HTTP2_TAIL_MS } from "./delivery-reading.ts";
import type { Undelivered } from "../envoy/sockets.ts";
import type { ModeContext } from "./modes/context.ts";
import { DRAIN_WAITS } from "./modes/index.ts";
import { type DrainPlan, floorAt } from "./plan.ts";

/**
 * How old the wait's last reading may be for the stop to report it as the state at the stop
 * (`inflight_at_stop`, `bytes_unsent_at_stop`) instead of reading again.
 */
export const SETTLED_FRESH_MS = 50;

/** The wait's last reading, when it is recent enough to be the state at the stop. */
export function freshReading(last: Settled | undefined): Settled | undefined {
  return last && Date.now() - last.at <= SETTLED_FRESH_MS ? last : undefined;
}

/** Why waiting ended early, as an abort reason. */
export class DrainEnded extends Error {
  override name = "DrainEnded";
  /**
   * Every reason a wait can be ended for (the wait itself logs none of them); `taken_over`: a
   * termination's wait replaced a `POST /drain`'s.
   */
  static readonly reasons: readonly string[] = [
    "deadline",
    "stopped_now",
    "envoy_exited",
    "taken_over",
  ];
  constructor(readonly reason: "deadline" | "stopped_now" | "envoy_exited" | "taken_over") {
    super(reason);
  }
}

/** What the wait reads. */
export interface WaitDeps extends ModeContext {
  /** Requests in flight in the epochs now, from Envoy itself; undefined when unknown. */
  measure(signal: AbortSignal): Promise<number | undefined>;
  /** Waits while the app beside the proxy still runs; true if it had to wait. */
  waitForApp?(signal: AbortSignal): Promise<boolean>;
  /** Response bytes the epochs still have to deliver to their clients (undefined: unknown). */
  undelivered?(): Promise<Undelivered | undefined>;
  /** What the wait read last, right before it ended (a counting mode's zero, the bytes left). */
  settled?(last: Settled): void;
}

/** The last reading of a drain's wait, taken right before it ended. */
export interface Settled {
  /** When it was read, in ms since the epoch. */
  at: number;
  inflight: number;
  bytesUnsent?: number;
  /** What the delivery wait could not look at (there is then no `bytesUnsent`). */
  unchecked?: string[];
}

/** Shortest pause: each look reads the kernel's TCP tables (a few ms of CPU). */
const DELIVERY_POLL_MIN_MS = 2;

/**
 * Waits until no accepted connection of the Envoys has a response byte left to deliver: the
 * kernel's send queues are empty, and so are Envoy's own buffers (HTTP/2 bytes waiting for a
 * client's window, write buffers; what cannot be seen is only said at the stop); then, for at
 * most {@linkcode HTTP2_TAIL_MS}, until the drained HTTP/2 connections are closed (a client reads
 * its last window, then closes), and those of a hot-restart parent seen carrying bytes (its
 * buffers cannot be read; its delayed close ends them within that time). A slow reader keeps its
 * connection's queue full long after Envoy finished the stream: this is what makes "done" mean
 * the client's last byte. Looks again when the queues should be empty at the rate they have
 * been emptying (at most every 50 ms), so the end is seen a few ms after it comes. Resolves with
 * whether it had to wait, and the last reading.
 */
async function waitDelivered(
  deps: WaitDeps,
  signal: AbortSignal,
): Promise<{ waited: boolean; left?: Undelivered }> {
  let waited = false;
  let previous: { bytes: number; at: number } | undefined;
  let tailFrom: number | undefined; // when Envoy was first seen holding nothing
  // Connections of an Envoy whose buffers cannot be read, seen carrying bytes: waited for too.
  const carrying = new Set<number>();
  for (;;) {
    const started = Date.now();
    const left = await deps.undelivered?.();
    const at = Date.now();
    for (const [inode, sending] of left?.unseen ?? []) if (sending) carrying.add(inode);
    const unseenOpen = [...carrying].filter((inode) => left?.unseen?.has(inode)).length;
    if (!left || (left.bytes === 0 && !left.http2Open && !unseenOpen)) return { waited, left };
    tailFrom = left.bytes === 0 ? (tailFrom ?? at) : undefined;
    if (tailFrom !== undefined && at - tailFrom >= HTTP2_TAIL_MS) return { waited, left };
    const flushing = {
      bytes: left.bytes,
      connections: left.sending,
      ...(left.http2Open ? { http2_open: left.http2Open } : {}),
      ...(unseenOpen ? { unseen_open: unseenOpen } : {}),
    };
    if (!waited) deps.log("drain_flushing", flushing);
    waited = true;
    const rate = previous && previous.bytes > left.bytes
      ? (previous.bytes - left.bytes) / Math.max(1, at - previous.at)
      : 0;
    const untilEmpty = rate > 0 ? left.bytes / rate - (at - started) : DELIVERY_POLL_MS;
    previous = { bytes: left.bytes, at };
    await delay(
      Math.min(DELIVERY_POLL_MS, Math.max(DELIVERY_POLL_MIN_MS, Math.floor(untilEmpty))),
      signal,
    );
  }
}

/**
 * The drain's wait: by mode until the drain may end, and returns why (`inflight_zero`,
 * `requests_zero`, `connections_zero`, `sleep_done`, …), or `deadline`, `stopped_now`,
 * `envoy_exited` when `ended` aborts with a {@linkcode DrainEnded}. A zero seen before the
 * floor (`--min-drain`) is not an end: the wait goes on, and requests that arrive during the
 * floor are waited for. An app that still runs beside the proxy is waited for too (its outbound
 * calls go through Envoy). In the counting modes, the count is read once more right before the
 * end (unless the wait just ended on a pulled zero); if it is not zero, the wait resumes; then
 * the wait lasts until every response byte has been delivered to its client.
 *
 * @example
 * ```ts
 * const reason = await waitDrained(plan, deps, AbortSignal.timeout(plan.deadline - Date.now()));
 * ```
 */
export async function waitDrained(
  plan: DrainPlan,
  deps: WaitDeps,
  ended: AbortSignal,
): Promise<string> {
  const { log } = deps;
  const floor = () => floorAt(plan);
  const counting = plan.mode === "inflight" || plan.mode === "requests";
  let floorLogged = false;
  try {
    for (;;) {
      const reason = await DRAIN_WAITS[plan.mode](deps, ended);
      if (Date.now() < floor()) {
        if (!floorLogged) log("min_drain_wait", { ms: floor() - Date.now(), reason });
        floorLogged = true;
        // Every app gone cuts the floor short (Drainer.appsGone).
        const cut = plan.floorCut ? AbortSignal.any([ended, plan.floorCut]) : ended;
        await delay(floor() - Date.now(), cut).catch((error) => {
          if (ended.aborted) throw error;
        });
        if (!counting) return reason;
        continue; // a zero before the floor is not the end: count again
      }
      // The app may still call out through Envoy as it shuts down: wait for it, then count again.
      if (deps.waitForApp && await deps.waitForApp(ended)) continue;
      if (counting) {
        // A zero the filters were just pulled for is the last word already (read after the wait
        // began, nothing awaited since); any other end reads the count once more.
        const pulled = reason === "inflight_zero" && deps.statsCounted.length === 0;
        const now = pulled ? 0 : await deps.measure(ended).catch(() => undefined);
        if (now !== undefined && now > 0) {
          log("drain_resumed", { inflight: now, after: reason });
          continue;
        }
        // The last responses may still be on their way to slow readers; once they are
        // delivered, count once more: a request may have come meanwhile (one that came and went
        // within the last look at the queues, its bytes still queued, is the same few-ms race
        // as one that comes between this count and the stop).
        const delivery = await waitDelivered(deps, ended);
        let inflight = now ?? 0;
        if (delivery.waited) {
          const again = await deps.measure(ended).catch(() => undefined);
          if (again !== undefined && again > 0) {
            log("drain_resumed", { inflight: again, after: "delivered" });
            continue;
          }
          inflight = again ?? 0;
        }
        deps.settled?.({ at: Date.now(), inflight, ...deliveryReading(delivery.left) });
      }
      log("drain_wait_done", {
        mode: plan.mode,
        reason,
        ms: Date.now() - plan.startedAt,
        ...(plan.epochs ? { epochs: plan.epochs } : {}),
      });
      return reason;
    }
  } catch (error) {
    const cause = ended.aborted ? ended.reason : error;
    if (cause instanceof DrainEnded) return cause.reason;
    throw error;
  }
}
