// One drain of the live epochs: it begins (readiness fails, listeners drain), then waits by mode
// until nothing is in flight and every response byte is delivered, or its deadline. The
// termination (termination.ts) and `POST /drain` run it; reloads' old epochs use its wait.
import { delay } from "../lib/async.ts";
import type { EventLog } from "../lib/log.ts";
import type { RunOptions } from "../options.ts";
import type { AppWatch } from "../supervise/app-watch.ts";
import { drainBegins } from "./delivery.ts";
import { DELIVERY_POLL_MS, deliveryReading, HTTP2_TAIL_MS } from "./delivery-reading.ts";
import type { Undelivered } from "../envoy/sockets.ts";
import type { LiveEpochs } from "./epochs.ts";
import type { ModeContext } from "./modes/context.ts";
import { DRAIN_WAITS } from "./modes/index.ts";
import { type DrainPlan, type DrainRequest, floorAt, floorFromAsked } from "./plan.ts";
import type { DrainView, DrainWatch } from "./waiting.ts";

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
  /** Response bytes the epochs still have to deliver on accepted connections; undefined when unknown. */
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
 * its last window, then closes). A slow reader keeps its
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

/** What the drainer reads. */
export interface DrainerDeps {
  options: RunOptions;
  log: EventLog;
  epochs: LiveEpochs;
  app: AppWatch;
  /** Says what the drain waits for while it waits. */
  watch: DrainWatch;
}

/**
 * The one drain of lastcall's life (a termination takes over a `POST /drain` under way).
 *
 * @example
 * ```ts
 * const drainer = new Drainer({ options, log, epochs, app, watch });
 * const plan = drainer.begin("SIGTERM", true);
 * const reason = await drainer.wait(plan); // "inflight_zero"
 * ```
 */
export class Drainer {
  readonly #deps: DrainerDeps;
  #plan?: DrainPlan;
  /** The last reading of the drain's wait. */
  #settled?: Settled;
  /** Ends the wait under way (see {@linkcode Drainer.wait}). */
  #waiting?: AbortController;
  /** Aborted once every app has gone: the drain's floor no longer holds. */
  readonly #floorCut = new AbortController();
  /** `POST /drain?sidecar=native` came: the sidecar's SIGTERM will mean every app has exited. */
  #nativeSidecar = false;
  #began!: (plan: DrainPlan) => void;
  /** Settles as the drain begins: from then on readiness fails and the filters are told. */
  readonly began: Promise<DrainPlan> = new Promise((resolve) => (this.#began = resolve));

  constructor(deps: DrainerDeps) {
    this.#deps = deps;
    deps.app.onGone((via) => this.appsGone(via));
  }

  /** The drain under way, if one began. */
  get plan(): DrainPlan | undefined {
    return this.#plan;
  }

  /** What the wait read last, right before it ended (see {@linkcode waitDrained}). */
  get settled(): Settled | undefined {
    return this.#settled;
  }

  /** What the drain under way waits for (`drain` of `/v1/state`); undefined outside a drain. */
  view(): DrainView | undefined {
    return this.#plan && this.#deps.watch.view(this.#plan);
  }

  /**
   * Begins the drain, once: readiness fails at once (`began`), and every epoch that can be asked
   * drains its listeners. A termination (`terminating`) after a `POST /drain` keeps that drain
   * and takes its deadline from now: the grace period runs from the signal. `askedAt`: when the
   * caller started: the floor runs from it (see {@linkcode floorFromAsked}).
   */
  begin(source: string, terminating = false, askedAt?: number): DrainPlan {
    const { options: o, log, epochs } = this.#deps;
    const now = Date.now();
    const floorFrom = floorFromAsked(askedAt, now);
    if (this.#plan) {
      if (terminating && this.#plan.terminatedAt === undefined) {
        this.#plan.terminatedAt = now;
        this.#plan.graceEndsAt = now + o.graceMs;
        this.#plan.deadline = now + o.graceMs - o.stopMarginMs;
        log("drain_deadline", {
          source,
          deadline_ms: this.#plan.deadline - now,
          drain_ms: now - this.#plan.startedAt,
        });
        // A native sidecar: the kubelet sends its SIGTERM only once every app container has exited.
        if (this.#nativeSidecar) void this.#goneUnlessRunning(`${source} of a native sidecar`);
      }
      return this.#plan;
    }
    const plan: DrainPlan = {
      source,
      mode: o.drainMode,
      scope: o.drainScope,
      failHealthcheck: o.failHealthcheck,
      drainDelayMs: o.drainDelayMs,
      minDrainMs: o.minDrainMs,
      startedAt: now,
      ...(floorFrom !== undefined ? { floorFrom } : {}),
      ...(terminating ? { terminatedAt: now, graceEndsAt: now + o.graceMs } : {}),
      deadline: now + o.graceMs - o.stopMarginMs,
      floorCut: this.#floorCut.signal,
    };
    this.#plan = plan;
    this.#began(plan);
    const context = epochs.waitContext();
    log("drain_start", {
      source,
      mode: plan.mode,
      scope: plan.scope,
      deadline_ms: plan.deadline - now,
      min_drain_ms: plan.minDrainMs,
      ...(plan.floorFrom !== undefined ? { floor_from_ms_before: now - plan.floorFrom } : {}),
      ...(context.statsCounted.length ? { counted_by_stats: context.statsCounted } : {}),
    });
    void drainBegins(epochs.running()); // learns the listening ports before Envoy closes them
    epochs.drainListeners(plan);
    if (this.#deps.app.gone()) this.appsGone("lastcall exec");
    return plan;
  }

  /**
   * `POST /drain`: begins the drain without a termination, once, and waits; the wait's end is
   * logged (`drain_wait_done`) and Envoy runs on. A termination meanwhile takes the drain over.
   * Returns the plan and the wait, or undefined when a drain began already.
   */
  drainInPlace(
    request: DrainRequest,
    stopNow?: AbortSignal,
  ): { plan: DrainPlan; ended: Promise<string> } | undefined {
    this.#nativeSidecar ||= request.nativeSidecar;
    if (this.#plan) return undefined;
    const plan = this.begin(request.source ?? "POST /drain", false, request.askedAt);
    const ended = this.wait(plan, stopNow);
    ended.then(
      // An end the wait did not log itself (the deadline): said, so /drain's caller knows.
      (reason) => {
        const terminating = plan.terminatedAt !== undefined;
        if (!terminating && DrainEnded.reasons.includes(reason)) {
          this.#deps.log("drain_wait_done", {
            mode: plan.mode,
            reason,
            ms: Date.now() - plan.startedAt,
          });
        }
      },
      // A fault in the wait is lastcall's own bug: said, and a termination still stops Envoy.
      (error) => this.#deps.log("drain_wait_failed", { error: String(error) }),
    );
    return { plan, ended };
  }

  /**
   * Every app beside the proxy has gone (`via` says how it is known): nothing is left to forward
   * inbound requests to. The floor no longer holds, inbound listeners close at once, and the
   * drain waits only for what is in flight and still to deliver; Envoy's stop then closes the
   * idle keep-alive connections, which a draining Envoy never closes by itself. Once per drain.
   */
  appsGone(via: string): void {
    const plan = this.#plan;
    if (!plan || this.#floorCut.signal.aborted) return;
    const now = Date.now();
    const floorLeftMs = Math.max(0, floorAt(plan) - now);
    this.#deps.log("apps_gone", {
      via,
      drain_ms: now - plan.startedAt,
      floor_left_ms: floorLeftMs,
    });
    this.#floorCut.abort();
    void this.#deps.epochs.closeInbound(`apps gone (${via})`);
  }

  async #goneUnlessRunning(via: string): Promise<void> {
    if (!await this.#deps.app.running()) this.appsGone(via);
  }

  /**
   * The wait by mode and for delivery, within the deadline (see {@linkcode waitDrained}); `stopped_now` once `stopNow`
   * aborts (SIGINT twice), `envoy_exited` once every epoch has exited.
   */
  async wait(plan: DrainPlan, stopNow?: AbortSignal): Promise<string> {
    const { epochs, watch, app } = this.#deps;
    // One wait at a time: a termination's, with its own deadline, replaces a POST /drain's (two
    // would each log every line of the wait).
    this.#waiting?.abort(new DrainEnded("taken_over"));
    const ended = new AbortController();
    this.#waiting = ended;
    const end = (reason: DrainEnded["reason"]) => () => ended.abort(new DrainEnded(reason));
    const timer = setTimeout(end("deadline"), Math.max(0, plan.deadline - Date.now()));
    stopNow?.addEventListener("abort", end("stopped_now"), { once: true });
    if (stopNow?.aborted) end("stopped_now")();
    Promise.all(epochs.running().map((l) => l.process.exited)).then(end("envoy_exited"));
    const waitOver = new AbortController();
    void watch.sayWhileWaiting(plan, AbortSignal.any([ended.signal, waitOver.signal]));
    try {
      const context = epochs.waitContext();
      return await waitDrained(plan, {
        ...context,
        measure: (s) => epochs.measure(s),
        waitForApp: (s) => app.waitGone(s),
        // The HTTP/2 connections waited for: the drained connection managers'.
        undelivered: () =>
          epochs.undelivered(context.statPrefixes).then((left) => watch.sawUndelivered(left)),
        settled: (last) => void (this.#settled = last),
      }, ended.signal);
    } finally {
      waitOver.abort();
      clearTimeout(timer);
    }
  }
}
