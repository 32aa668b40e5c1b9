// The termination sequence (SIGTERM path 4/4): fail readiness (done by the caller), fail
// Envoy's health check, wait for load balancers, drain listeners, wait by mode until a confirmed
// zero at or after the floor (`--min-drain`) and before the deadline, then stop Envoy with
// escalation. The rule: an Envoy is stopped only when it has nothing in flight and no response
// byte left to deliver, or at the deadline.
import { delay } from "../lib/async.ts";
import { retry } from "../lib/retry.ts";
import type { AdminClient } from "../envoy/admin.ts";
import type { EnvoyProcess } from "../envoy/process.ts";
import type { Undelivered } from "../envoy/sockets.ts";
import type { EventLog } from "../lib/log.ts";
import type { DrainMode, DrainScope } from "../options.ts";
import type { LiveEnvoy } from "../supervise/envoys.ts";
import type { ModeContext } from "./modes/context.ts";
import { DRAIN_WAITS } from "./modes/index.ts";

/** The plan of one drain, resolved from the options at the moment of the signal. */
export interface DrainPlan {
  /** What began it: a signal, `POST /drain`, `POST /quitquitquit`. */
  source?: string;
  mode: DrainMode;
  scope: DrainScope;
  failHealthcheck: boolean;
  drainDelayMs: number;
  minDrainMs: number;
  /** When the drain began (the signal, or `/drain`), ms since the epoch; the floor runs from it. */
  startedAt: number;
  /**
   * When the termination signal came, once one did: the grace period runs from it (a drain
   * begun by `POST /drain` gets its deadline from the later signal).
   */
  terminatedAt?: number;
  /** The latest moment to begin stopping Envoy: signal + grace − stop margin. */
  deadline: number;
  /** The old epochs a reload's drain is for (absent for the termination's drain). */
  epochs?: number[];
  /** Aborts once every app has gone: the floor no longer holds (nothing is left to forward to). */
  floorCut?: AbortSignal;
}

/**
 * How old the wait's last reading may be for the stop to report it as the state at the stop
 * (`inflight_at_stop`, `bytes_unsent_at_stop`) instead of reading again.
 */
export const SETTLED_FRESH_MS = 50;

/** The wait's last reading, when it is recent enough to be the state at the stop. */
export function freshReading(last: Settled | undefined): Settled | undefined {
  return last && Date.now() - last.at <= SETTLED_FRESH_MS ? last : undefined;
}

/**
 * Requests in flight now, counted within `ms`; when no count comes, the latest report to arrive
 * (a hint only: a VM's earlier report can arrive after its later one).
 *
 * @example
 * ```ts
 * const inflight = await countNow((s) => drainer.measure(s), () => tracker.inflight(ids), 500);
 * ```
 */
export function countNow(measure: (signal: AbortSignal) => Promise<number | undefined>, hint: () => number, ms: number): Promise<number> {
  return measure(AbortSignal.timeout(ms)).catch(() => undefined).then((n) => n ?? hint());
}

/** Why waiting ended early, as an abort reason. */
export class DrainEnded extends Error {
  override name = "DrainEnded";
  /** Every reason a wait can be ended for (the wait itself logs none of them). */
  static readonly reasons: readonly string[] = ["deadline", "stopped_now", "envoy_exited"];
  constructor(readonly reason: "deadline" | "stopped_now" | "envoy_exited") {
    super(reason);
  }
}

/** Pause between two tries of an admin call that failed during a drain. */
const ADMIN_RETRY_MS = 250;

/**
 * Calls `call` until it succeeds or `signal` aborts, logging each failure; resolves true on
 * success, false when aborted. Each try is bounded by the signal (and the client's own timeout).
 */
export async function retryAdmin(
  what: string,
  call: (signal: AbortSignal) => Promise<unknown>,
  signal: AbortSignal,
  log: EventLog,
): Promise<boolean> {
  try {
    await retry(call, {
      signal,
      delayMs: (attempt) => Math.min(ADMIN_RETRY_MS * attempt, 1000),
      onError: (error, attempt) => log("admin_call_failed", { call: what, attempt, error: String((error as Error).message ?? error) }),
    });
    return true;
  } catch {
    return false;
  }
}

/**
 * Steps 2–4 for one Envoy: fail its health check (when planned), wait `--drain-delay`, then start
 * Envoy's graceful drain of its listeners. Admin calls that fail are retried until `signal`
 * aborts (the deadline): a busy Envoy is asked again, never given up on.
 */
export async function drainListeners(
  plan: DrainPlan,
  admin: AdminClient,
  log: EventLog,
  signal: AbortSignal,
  options: { healthcheck?: boolean; delay?: boolean } = {},
): Promise<boolean> {
  if (plan.failHealthcheck && options.healthcheck !== false) {
    if (!await retryAdmin("healthcheck/fail", (s) => admin.failHealthcheck(s), signal, log)) return false;
    log("healthcheck_failed");
  }
  if (plan.drainDelayMs > 0 && options.delay !== false) {
    log("drain_delay", { ms: plan.drainDelayMs });
    try {
      await delay(plan.drainDelayMs - (Date.now() - plan.startedAt), signal);
    } catch {
      return false;
    }
  }
  if (!await retryAdmin("drain_listeners", (s) => admin.drainListeners(plan.scope, s), signal, log)) return false;
  log("listeners_draining", { scope: plan.scope, admin: admin.url });
  return true;
}

/** What the wait needs from the agent. */
export interface WaitDeps extends ModeContext {
  /** Requests in flight in the live Envoys now, from Envoy itself; undefined when unknown. */
  measure(signal: AbortSignal): Promise<number | undefined>;
  /** Waits while the app beside the proxy still runs; true if it had to wait. */
  waitForApp?(signal: AbortSignal): Promise<boolean>;
  /** Response bytes the Envoys still have to deliver on accepted connections; undefined when unknown. */
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

/**
 * A delivery reading as the stop reports it: the bytes left when every buffer was looked at,
 * else what could not be (never a 0 for what was not seen).
 *
 * @example
 * ```ts
 * deliveryReading({ connections: 1, sending: 0, bytes: 0 }); // { bytesUnsent: 0 }
 * ```
 */
export function deliveryReading(left: Undelivered | undefined): Pick<Settled, "bytesUnsent" | "unchecked"> {
  if (!left) return {};
  return left.unchecked?.length ? { unchecked: left.unchecked } : { bytesUnsent: left.bytes };
}

/** Longest pause between two looks at what Envoy's last responses still have to deliver. */
export const DELIVERY_POLL_MS = 50;
/** Shortest pause: each look reads the kernel's TCP tables (a few ms of CPU). */
const DELIVERY_POLL_MIN_MS = 2;

/**
 * How long the delivery wait, once Envoy holds no byte, still waits for the drained HTTP/2
 * connections to close: their clients may be reading what they took (up to a window). Envoy
 * never closes an idle one on a drain, so this bounds what an idle pooled client adds.
 */
export const HTTP2_TAIL_MS = 3000;

/**
 * Waits until no accepted connection of the Envoys has a response byte left to deliver: the
 * kernel's send queues are empty, and so are Envoy's own buffers (HTTP/2 bytes waiting for a
 * client's window, write buffers; what cannot be seen is only said at the stop); then, for at
 * most {@linkcode HTTP2_TAIL_MS}, until the drained HTTP/2 connections are closed (a client reads
 * its last window, then closes). A slow reader keeps its
 * connection's queue full long after Envoy finished the stream: this is what makes "done" mean
 * the client's last byte. Looks again when the queues should be empty at the rate they have
 * been emptying (at most every 50 ms), so the end is seen a few ms after it comes. Resolves with
 * whether it had to wait, and the last reading.
 */
export async function waitDelivered(deps: WaitDeps, signal: AbortSignal): Promise<{ waited: boolean; left?: Undelivered }> {
  let waited = false;
  let previous: { bytes: number; at: number } | undefined;
  let tailFrom: number | undefined; // when Envoy was first seen holding nothing
  for (;;) {
    const started = Date.now();
    const left = await deps.undelivered?.();
    const at = Date.now();
    if (!left || (left.bytes === 0 && !left.http2Open)) return { waited, left };
    tailFrom = left.bytes === 0 ? (tailFrom ?? at) : undefined;
    if (tailFrom !== undefined && at - tailFrom >= HTTP2_TAIL_MS) return { waited, left };
    const http2 = left.http2Open ? { http2_open: left.http2Open } : {};
    const flushing = { bytes: left.bytes, connections: left.sending, ...http2 };
    if (!waited) deps.log("drain_flushing", flushing);
    waited = true;
    const rate = previous && previous.bytes > left.bytes ? (previous.bytes - left.bytes) / Math.max(1, at - previous.at) : 0;
    const untilEmpty = rate > 0 ? left.bytes / rate - (at - started) : DELIVERY_POLL_MS;
    previous = { bytes: left.bytes, at };
    await delay(Math.min(DELIVERY_POLL_MS, Math.max(DELIVERY_POLL_MIN_MS, Math.floor(untilEmpty))), signal);
  }
}

/**
 * Step 5: waits by mode until the drain may end and returns why (`inflight_zero`,
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
export async function waitDrained(plan: DrainPlan, deps: WaitDeps, ended: AbortSignal): Promise<string> {
  const { log } = deps;
  const floor = () => (plan.floorCut?.aborted ? 0 : plan.startedAt + plan.minDrainMs);
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
      // The app may still call out through Envoy while it shuts down: wait for it, then count again.
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
      log("drain_wait_done", { mode: plan.mode, reason, ms: Date.now() - plan.startedAt, ...(plan.epochs ? { epochs: plan.epochs } : {}) });
      return reason;
    }
  } catch (error) {
    const cause = ended.aborted ? ended.reason : error;
    if (cause instanceof DrainEnded) return cause.reason;
    throw error;
  }
}

/** One Envoy to stop: its process, and its admin when it can still be asked to quit. */
export interface StopTarget {
  process: EnvoyProcess;
  admin?: AdminClient;
}

/** How a live Envoy is stopped: by its admin, unless a hot-restart child took that over. */
export function stopTargetOf(live: LiveEnvoy): StopTarget {
  return { process: live.process, admin: live.adminHandedOver ? undefined : live.admin };
}

/**
 * Stops every given Envoy within `budgetMs`: those with an admin by `POST /quitquitquit`, the
 * others (hot-restart parents whose admin a child took over) by SIGTERM; whatever still runs
 * after half the budget gets SIGTERM, and SIGKILL at the end (which also ends a stopped,
 * hung process). Resolves when all have exited.
 */
export async function stopEnvoys(targets: readonly StopTarget[], log: EventLog, budgetMs: number): Promise<void> {
  const startedAt = Date.now();
  const left = () => Math.floor(Math.max(0, budgetMs - (Date.now() - startedAt)));
  await Promise.all(targets.map(async ({ process, admin }) => {
    if (!process.running) return;
    let asked = false;
    if (admin) {
      try {
        await admin.quit(AbortSignal.timeout(Math.max(1, Math.floor(budgetMs / 3))));
        log("envoy_quit_requested", { pid: process.pid });
        asked = true;
      } catch (error) {
        log("envoy_quit_failed", { pid: process.pid, error: String((error as Error).message ?? error) });
      }
    }
    if (!asked) process.signal("SIGTERM");
    const exited = await Promise.race([process.exited, delay(left() / 2).then(() => undefined)]);
    if (exited) return;
    process.signal("SIGTERM");
    const late = await Promise.race([process.exited, delay(left()).then(() => undefined)]);
    if (late) return;
    process.signal("SIGKILL");
    const exit = await process.exited;
    log("envoy_killed", { pid: process.pid, exit: exit.signal ?? exit.code });
  }));
}
