// One drain of the live epochs: it begins (readiness fails, listeners drain), then waits by mode
// until nothing is in flight and every response byte is delivered, or its deadline. The
// termination (termination.ts) and `POST /drain` run it; its wait is wait.ts.
import type { EventLog } from "../lib/log.ts";
import type { RunOptions } from "../options.ts";
import type { AppWatch } from "../supervise/app-watch.ts";
import { drainBegins } from "./delivery.ts";
import type { LiveEpochs } from "./epochs.ts";
import { type DrainPlan, type DrainRequest, floorAt, floorFromAsked } from "./plan.ts";
import { DrainEnded, type Settled, waitDrained } from "./wait.ts";
import type { DrainView, DrainWatch } from "./waiting.ts";

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
  /** How the last wait ended, while no other runs: a drain in place whose Envoy serves on. */
  #waitEnded?: { reason: string; at: number };
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

  /** Whether the drain under way is a pod's end: a termination, or a native sidecar's preStop. */
  get podEnding(): boolean {
    return this.#plan?.terminatedAt !== undefined || this.#nativeSidecar;
  }

  /** What the wait read last, right before it ended (see {@linkcode waitDrained}). */
  get settled(): Settled | undefined {
    return this.#settled;
  }

  /** What the drain under way waits for (`drain` of `/v1/state`); undefined outside a drain. */
  view(): DrainView | undefined {
    const plan = this.#plan;
    if (!plan) return undefined;
    const ended = this.#waitEnded;
    const after = ended && { reason: ended.reason, after_ms: ended.at - plan.startedAt };
    return { ...this.#deps.watch.view(plan), ...(after ? { wait_ended: after } : {}) };
  }

  /**
   * Begins the drain, once: readiness fails at once (`began`), and every epoch that can be asked
   * drains its listeners. A termination (`terminating`) after a `POST /drain` keeps that drain
   * and takes its deadline from now: the grace period runs from the signal; one the apps'
   * preStop began (`"by apps"`) keeps the drain's deadline, as no new grace came with it.
   * `askedAt`: when the caller started: the floor runs from it (see {@linkcode floorFromAsked}).
   */
  begin(source: string, terminating: boolean | "by apps" = false, askedAt?: number): DrainPlan {
    const { options: o, log, epochs } = this.#deps;
    const now = Date.now();
    const floorFrom = floorFromAsked(askedAt, now);
    if (this.#plan) {
      if (terminating && this.#plan.terminatedAt === undefined) {
        this.#plan.terminatedAt = now;
        if (terminating === true) {
          this.#plan.graceEndsAt = now + o.graceMs;
          this.#plan.deadline = now + o.graceMs - o.stopMarginMs;
        }
        log("drain_deadline", {
          source,
          deadline_ms: this.#plan.deadline - now,
          drain_ms: now - this.#plan.startedAt,
        });
        // A native sidecar: the kubelet sends its SIGTERM only once every app container has exited.
        if (terminating === true && this.#nativeSidecar) {
          void this.#goneUnlessRunning(`${source} of a native sidecar`);
        }
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
    this.#waitEnded = undefined;
    const end = (reason: DrainEnded["reason"]) => () => ended.abort(new DrainEnded(reason));
    const timer = setTimeout(end("deadline"), Math.max(0, plan.deadline - Date.now()));
    stopNow?.addEventListener("abort", end("stopped_now"), { once: true });
    if (stopNow?.aborted) end("stopped_now")();
    Promise.all(epochs.running().map((l) => l.process.exited)).then(end("envoy_exited"));
    const waitOver = new AbortController();
    void watch.sayWhileWaiting(plan, AbortSignal.any([ended.signal, waitOver.signal]));
    try {
      const context = epochs.waitContext();
      const reason = await waitDrained(plan, {
        ...context,
        measure: (s) => epochs.measure(s),
        waitForApp: (s) => app.waitGone(s),
        // The HTTP/2 connections waited for: the drained connection managers'.
        undelivered: () =>
          epochs.undelivered(context.statPrefixes).then((left) => watch.sawUndelivered(left)),
        settled: (last) => void (this.#settled = last),
      }, ended.signal);
      if (this.#waiting === ended) this.#waitEnded = { reason, at: Date.now() };
      return reason;
    } finally {
      waitOver.abort();
      clearTimeout(timer);
    }
  }
}
