// The drain of the live Envoys (SIGTERM path 3/3, with shutdown.ts): fail readiness, drain the
// listeners of every Envoy that can be asked, wait by mode within the deadline, count what is
// in flight from Envoy itself, and stop. The agent decides when; this does it.
import type { AppWatch } from "../app-watch.ts";
import type { LiveEnvoy, Envoys } from "../envoys.ts";
import { activeRequests, parseStatsJson } from "../envoy/stats.ts";
import type { EventLog } from "../log.ts";
import type { RunOptions } from "../options.ts";
import type { ReportDesk } from "../reports.ts";
import type { InflightTracker } from "./in-flight.ts";
import type { ModeContext } from "./modes/context.ts";
import { DrainEnded, drainListeners, type DrainPlan, stopEnvoys, waitDrained } from "./shutdown.ts";

/** What the drainer needs from the agent. */
export interface DrainerDeps {
  options: RunOptions;
  log: EventLog;
  envoys: Envoys;
  tracker: InflightTracker;
  desk: ReportDesk;
  app: AppWatch;
  /** Whether the filter is in Envoy. */
  filtered: boolean;
  /** Envoys stopped on purpose: their exit is no crash (shared with the agent). */
  retiring: Set<string>;
  /** Aborts when the operator insists (SIGINT twice). */
  stopNow: AbortSignal;
  /** Aborts when lastcall closes. */
  closing: AbortSignal;
  /** A drain began: the agent fails readiness. */
  onStart(plan: DrainPlan): void;
}

/** How a stop went. */
export interface StopOutcome {
  /** Requests in flight at the stop, read from Envoy. */
  inflightAtStop: number;
}

/**
 * Drains and stops the live Envoys.
 *
 * @example
 * ```ts
 * const drainer = new Drainer(deps);
 * const plan = drainer.start("SIGTERM");
 * const reason = await drainer.waitDrained(plan);
 * await drainer.stop(plan);
 * ```
 */
export class Drainer {
  readonly #deps: DrainerDeps;
  readonly #o: RunOptions;
  readonly #log: EventLog;
  readonly #envoys: Envoys;
  readonly #tracker: InflightTracker;
  readonly #desk: ReportDesk;
  readonly #filtered: boolean;
  /** Reporters of Envoys drained before a cold reload stops them. */
  readonly #coldDraining = new Set<string>();
  #plan?: DrainPlan;

  constructor(deps: DrainerDeps) {
    this.#deps = deps;
    this.#o = deps.options;
    this.#log = deps.log;
    this.#envoys = deps.envoys;
    this.#tracker = deps.tracker;
    this.#desk = deps.desk;
    this.#filtered = deps.filtered;
  }

  /** The drain under way, if one began. */
  get plan(): DrainPlan | undefined {
    return this.#plan;
  }

  /** Whether the filter reporting as `instance` should be told to drain. */
  isDraining(instance: string): boolean {
    return this.#plan !== undefined || this.#coldDraining.has(instance);
  }

  /** A cold reload leaves a gap: drain the old Envoy first, for at most `--drain-time`. */
  async drainBeforeColdReload(signal: AbortSignal): Promise<void> {
    const old = this.#envoys.all();
    const reporters = old.flatMap((l) => l.reporters);
    for (const id of reporters) this.#coldDraining.add(id);
    this.#desk.drainStarted();
    const startedAt = Date.now();
    const plan: DrainPlan = {
      mode: this.#filtered && reporters.length > 0 ? "inflight" : "requests",
      scope: this.#o.drainScope,
      failHealthcheck: false,
      drainDelayMs: 0,
      minDrainMs: 0,
      startedAt,
      deadline: startedAt + this.#o.drainTimeMs,
    };
    const ended = new AbortController();
    const timer = setTimeout(() => ended.abort(new DrainEnded("deadline")), this.#o.drainTimeMs);
    signal.addEventListener("abort", () => ended.abort(signal.reason), { once: true });
    try {
      for (const l of old) if (l.admin && !l.adminHandedOver) void drainListeners(plan, l.admin, this.#log, ended.signal);
      const reason = await waitDrained(plan, { ...this.modeContext(() => reporters), measure: (s) => this.measure(s) }, ended.signal);
      this.#log("reload_drained", { reason, ms: Date.now() - startedAt });
    } finally {
      clearTimeout(timer);
    }
    signal.throwIfAborted();
  }

  modeContext(instances = () => this.#envoys.reporters()): ModeContext {
    const o = this.#o;
    const bootstraps = this.#envoys.all().map((l) => l.bootstrap);
    const statsCounted = [...new Set(bootstraps.flatMap((b) => b.unseenListeners))];
    const prefixes = new Set(bootstraps.flatMap((b) => b.inboundStatPrefixes));
    return {
      admin: () => {
        const serving = this.#envoys.serving();
        return serving && !serving.adminHandedOver ? serving.admin : undefined;
      },
      tracker: this.#tracker,
      instances,
      // Listeners lastcall cannot see, or no known prefix: count every connection manager.
      statPrefixes: o.drainScope === "all" || statsCounted.length > 0 || prefixes.size === 0 ? undefined : prefixes,
      statsCounted,
      log: this.#log,
      terminationDrainMs: o.terminationDrainMs,
      heartbeatMs: o.heartbeatMs,
    };
  }

  /** Step 1 (readiness fails) at once, steps 2–4 on every Envoy that can be asked; idempotent. */
  start(source: string): DrainPlan {
    if (this.#plan) return this.#plan;
    const o = this.#o;
    const startedAt = Date.now();
    const plan: DrainPlan = {
      mode: o.drainMode,
      scope: o.drainScope,
      failHealthcheck: o.failHealthcheck,
      drainDelayMs: o.drainDelayMs,
      minDrainMs: o.minDrainMs,
      startedAt,
      deadline: startedAt + o.graceMs - o.stopMarginMs,
    };
    this.#plan = plan;
    this.#deps.onStart(plan); // step 1: /healthz/ready answers 503 from now on
    this.#desk.drainStarted();
    const context = this.modeContext();
    this.#log("drain_start", {
      source,
      mode: plan.mode,
      scope: plan.scope,
      deadline_ms: plan.deadline - startedAt,
      min_drain_ms: plan.minDrainMs,
      ...(context.statsCounted.length ? { counted_by_stats: context.statsCounted } : {}),
    });
    for (const live of this.#envoys.all()) this.drainListenersOf(live);
    return plan;
  }

  /** Asks one Envoy to drain its listeners (retried in the background until it answers). */
  drainListenersOf(live: LiveEnvoy): void {
    const plan = this.#plan;
    if (!plan || !live.ready || live.listenersDraining) return;
    if (!live.admin || live.adminHandedOver) {
      this.#log("listeners_not_drained", { epoch: live.info.epoch, pid: live.info.pid, why: "its admin went to a hot-restart child" });
      return;
    }
    live.listenersDraining = true;
    const gone = new AbortController();
    live.process.exited.then(() => gone.abort());
    void drainListeners(plan, live.admin, this.#log, AbortSignal.any([gone.signal, this.#deps.closing]));
  }

  /**
   * A terminate while no Envoy serves yet (the first one still INITIALIZING, a crash restart
   * starting) stops them at once: they have taken no traffic. A hot-restart child that is not
   * ready is left alone until its parent is drained: stopping it makes the parent exit too
   * (Envoy's hot-restart shutdown), cutting what the parent still serves.
   */
  async stopUnready(): Promise<void> {
    const all = this.#envoys.all().filter((l) => l.process.running);
    await Promise.all(all.filter((l) => !l.ready && l.admin).map(async (l) => {
      if ((await l.admin!.readiness(250)).live) l.ready = true; // it became ready just now
    }));
    for (const l of all) if (l.ready) this.drainListenersOf(l);
    const unready = all.filter((l) => !l.ready);
    if (unready.length === 0) return;
    if (all.some((l) => l.ready)) {
      this.#log("unready_epoch_kept", { epochs: unready.map((l) => l.info.epoch), why: "stopping it would stop the serving parent; it stops after the drain" });
      return;
    }
    this.#log("stopping_unready", { epochs: unready.map((l) => l.info.epoch), pids: unready.map((l) => l.info.pid) });
    for (const l of unready) this.#deps.retiring.add(l.info.instance);
    await stopEnvoys(unready.map((l) => ({ process: l.process })), this.#log, 1000);
  }

  /** Step 5 within the deadline; `stopped_now` on a second SIGINT, `envoy_exited` if all are gone. */
  async waitDrained(plan: DrainPlan): Promise<string> {
    const ended = new AbortController();
    const end = (reason: DrainEnded["reason"]) => () => ended.abort(new DrainEnded(reason));
    const timer = setTimeout(end("deadline"), Math.max(0, plan.deadline - Date.now()));
    this.#deps.stopNow.addEventListener("abort", end("stopped_now"), { once: true });
    if (this.#deps.stopNow.aborted) end("stopped_now")();
    const running = this.#envoys.all().filter((l) => l.process.running);
    Promise.all(running.map((l) => l.process.exited)).then(end("envoy_exited"));
    try {
      const waitForApp = (s: AbortSignal) => this.#deps.app.waitGone(s);
      return await waitDrained(plan, { ...this.modeContext(), measure: (s) => this.measure(s), waitForApp }, ended.signal);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Requests in flight now, from Envoy itself: the filter's gauge (an upper bound of its exact
   * counter) plus, for listeners the filter is not in, `downstream_rq_active`. With a hot restart
   * in progress (a child's stats import its parent's) the filters' latest reports are used.
   */
  async measure(signal: AbortSignal): Promise<number | undefined> {
    const all = this.#envoys.all().filter((l) => l.process.running);
    if (all.length === 0) return 0;
    const only = all.length === 1 ? all[0] : undefined;
    if (!only?.admin || only.adminHandedOver) {
      const ids = this.#envoys.reporters();
      return ids.length > 0 && ids.every((id) => this.#tracker.view(id)) ? this.#tracker.inflight(ids) : undefined;
    }
    const context = this.modeContext();
    const stats = parseStatsJson(await only.admin.stats("^wasmcustom\\.lastcall_inflight$|downstream_rq_active$", signal));
    if (!this.#filtered || only.reporters.length === 0) return activeRequests(stats, context.statPrefixes);
    const gauge = stats.find((s) => s.name === "wasmcustom.lastcall_inflight")?.value ?? 0;
    if (context.statsCounted.length === 0) return gauge;
    const filtered = new Set(only.bootstrap.inboundStatPrefixes);
    return gauge + activeRequests(stats) - activeRequests(stats, filtered);
  }

  /**
   * Stops every live Envoy within what is left of the grace period, after reading from Envoy
   * what is still in flight (the truth of `inflight_at_stop`).
   */
  async stop(plan: DrainPlan): Promise<StopOutcome> {
    // Everything from here fits in what is left of the grace period (less a little for exiting).
    const graceEnd = plan.startedAt + this.#o.graceMs - 300;
    const measureMs = Math.floor(Math.max(50, Math.min(500, (graceEnd - Date.now()) / 4)));
    const inflightAtStop = await this.measure(AbortSignal.timeout(measureMs))
      .catch(() => undefined) ?? this.#tracker.inflight(this.#envoys.reporters());
    const stopBudget = Math.max(200, graceEnd - Date.now());
    const targets = this.#envoys.all().filter((l) => l.process.running);
    for (const l of targets) this.#deps.retiring.add(l.info.instance);
    await stopEnvoys(targets.map((l) => ({ process: l.process, admin: l.adminHandedOver ? undefined : l.admin })), this.#log, stopBudget);
    return { inflightAtStop };
  }
}
