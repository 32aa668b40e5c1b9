// The drain of the live Envoys (SIGTERM path 4/4, with shutdown.ts): fail readiness, drain the
// listeners of every Envoy that can be asked, wait by mode within the deadline, count what is
// in flight from Envoy itself, and stop. The agent decides when; this does it.
import type { AppWatch } from "../supervise/app-watch.ts";
import type { LiveEnvoy, Envoys } from "../supervise/envoys.ts";
import { GAUGE_NAMES, activeRequests, isInflightGauge, parseStatsJson } from "../envoy/stats.ts";
import { drainBegins, undeliveredBy } from "./delivery.ts";
import type { EventLog } from "../lib/log.ts";
import type { RunOptions } from "../options.ts";
import type { InflightTracker } from "./in-flight.ts";
import type { ModeContext } from "./modes/context.ts";
import { finishOldEpochs } from "./old-epochs.ts";
import { InboundCloser, inboundInflight } from "./inbound.ts";
import type { DrainView, DrainWatch } from "./waiting.ts";
import type { DrainMetrics } from "./drain-metrics.ts";
import { DrainEnded, deliveryReading, drainListeners, type DrainPlan, countNow, freshReading, type Settled, waitDrained } from "./shutdown.ts";
import { stopEnvoy } from "../envoy/process.ts";


/** What the drainer needs from the agent. */
export interface DrainerDeps {
  options: RunOptions;
  log: EventLog;
  envoys: Envoys;
  tracker: InflightTracker;
  /** Tells the filters of the Envoys being drained at once (answers their held heartbeats). */
  tellFilters(): void;
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
  /** Says what the drain waits for while it waits. */
  watch: DrainWatch;
  /** How drains end, for `/metrics` (the old-epoch drains of reloads are observed here). */
  drains?: DrainMetrics;
}

/** How a stop went. */
export interface StopOutcome {
  /** Requests in flight at the stop, read from Envoy. */
  inflightAtStop: number;
  /** Response bytes not yet delivered at the stop (kernel send queues of accepted connections), when known. */
  bytesUnsentAtStop?: number;
  /** What the delivery check could not look at (then there is no `bytesUnsentAtStop`). */
  deliveryUnchecked?: string[];
  /**
   * From the wait's last reading of zero to the stop's order (ms), when the last wait ended on
   * a zero; the caller knows whether this drain's wait did (a counting mode's zero).
   */
  lastZeroToStopMs?: number;
}

export { undeliveredBy } from "./delivery.ts";

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
  readonly #filtered: boolean;
  /** Reporters of the old Envoys of a reload, being drained. */
  readonly #oldDraining = new Set<string>();
  readonly #finishing = new WeakSet<LiveEnvoy>();
  readonly #unfinished = new Set<Promise<void>>();
  #plan?: DrainPlan;
  /** The last reading of the drain's wait (see shutdown.ts). */
  #settled?: Settled;
  /** Aborted once every app has gone: the drain's floor no longer holds. */
  readonly #floorCut = new AbortController();
  readonly #inbound: InboundCloser;
  /** `POST /drain?sidecar=native` came: the sidecar's SIGTERM will mean every app has exited. */
  #nativeSidecar = false;

  constructor(deps: DrainerDeps) {
    this.#deps = deps;
    this.#o = deps.options;
    this.#log = deps.log;
    this.#envoys = deps.envoys;
    this.#tracker = deps.tracker;
    this.#filtered = deps.filtered;
    this.#inbound = new InboundCloser(deps.log, deps.closing);
    deps.app.onGone((via) => this.appsGone(via));
  }

  /** The drain under way, if one began. */
  get plan(): DrainPlan | undefined {
    return this.#plan;
  }

  /** What the drain under way waits for (`drain` of `/v1/state`); undefined outside a drain. */
  view(): DrainView | undefined {
    return this.#plan && this.#deps.watch.view(this.#plan);
  }

  /** Whether the filter reporting as `instance` should be told to drain. */
  isDraining(instance: string): boolean {
    return this.#plan !== undefined || this.#oldDraining.has(instance);
  }

  /**
   * Drains old Envoys of a reload and stops them once they have finished (see old-epochs.ts): a
   * hot restart's parent once its child serves, or, before a cold reload, the Envoy it replaces.
   */
  finishOld(all: LiveEnvoy[], kind: "hot" | "cold", signal: AbortSignal): Promise<string> {
    const old = all.filter((l) => !this.#finishing.has(l)); // a second reload finds the first's parent already finishing
    if (old.length === 0) return Promise.resolve("already_finishing");
    for (const l of old) this.#finishing.add(l);
    void drainBegins(old);
    const done = finishOldEpochs(old, {
      options: this.#o,
      log: this.#log,
      tracker: this.#tracker,
      retiring: this.#deps.retiring,
      markDraining: (ids) => {
        for (const id of ids) this.#oldDraining.add(id);
        this.#deps.tellFilters();
      },
      modeContext: (instances) => this.modeContext(instances),
      measure: (s) => this.measure(s, old.flatMap((l) => l.reporters)),
      undelivered: (live) => undeliveredBy(live),
      drains: this.#deps.drains,
    }, { kind, signal: AbortSignal.any([signal, this.#deps.closing]) });
    const settled = done.catch(() => {}).then(() => void this.#unfinished.delete(settled));
    this.#unfinished.add(settled);
    return done;
  }

  /**
   * Resolves once every old epoch being finished has finished (or reached its limit). A hot
   * restart waits for it: Envoy ends a grandparent as soon as the next child starts.
   */
  async oldFinished(): Promise<void> {
    await Promise.all([...this.#unfinished]);
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

  /**
   * `POST /drain`: steps 1–5 without the stop, once; the wait's end is logged (`drain_wait_done`)
   * and Envoy runs on. A termination meanwhile takes the drain over (`terminating`).
   */
  drainInPlace(terminating: () => boolean, nativeSidecar = false): void {
    this.#nativeSidecar ||= nativeSidecar;
    if (this.#plan) return;
    const plan = this.start("POST /drain");
    // Nothing is stopped: nothing is cut.
    const metered = this.#deps.drains?.started("drain", () => plan.deadline);
    this.waitDrained(plan).then(
      // An end the wait did not log itself (the deadline): said, so /drain's caller knows.
      (reason) => {
        if (!terminating() && DrainEnded.reasons.includes(reason)) this.#log("drain_wait_done", { mode: plan.mode, reason, ms: Date.now() - plan.startedAt });
        metered?.ended({ reason, drainMs: Date.now() - plan.startedAt, inflightAtStop: 0 });
      },
      // A fault in the wait is lastcall's own bug: said, and a termination still stops Envoy.
      (error) => {
        metered?.ended();
        this.#log("drain_wait_failed", { error: String(error) });
      },
    );
  }

  /**
   * Step 1 (readiness fails) at once, steps 2–4 on every Envoy that can be asked; idempotent. A
   * termination (`terminating`) after a `POST /drain` keeps that drain and takes its deadline
   * from now: the grace period runs from the signal.
   */
  start(source: string, terminating = false): DrainPlan {
    const o = this.#o;
    const now = Date.now();
    if (this.#plan) {
      if (terminating && this.#plan.terminatedAt === undefined) {
        this.#plan.terminatedAt = now;
        this.#plan.deadline = now + o.graceMs - o.stopMarginMs;
        this.#log("drain_deadline", { source, deadline_ms: this.#plan.deadline - now, drain_ms: now - this.#plan.startedAt });
        // A native sidecar: the kubelet sends its SIGTERM only once every app container has exited.
        if (this.#nativeSidecar) void this.#goneUnlessRunning(`${source} of a native sidecar`);
      }
      return this.#plan;
    }
    const startedAt = now;
    const plan: DrainPlan = {
      source,
      mode: o.drainMode,
      scope: o.drainScope,
      failHealthcheck: o.failHealthcheck,
      drainDelayMs: o.drainDelayMs,
      minDrainMs: o.minDrainMs,
      startedAt,
      ...(terminating ? { terminatedAt: startedAt } : {}),
      deadline: startedAt + o.graceMs - o.stopMarginMs,
      floorCut: this.#floorCut.signal,
    };
    this.#plan = plan;
    this.#deps.onStart(plan); // step 1: /healthz/ready answers 503 from now on
    this.#deps.tellFilters();
    const context = this.modeContext();
    this.#log("drain_start", {
      source,
      mode: plan.mode,
      scope: plan.scope,
      deadline_ms: plan.deadline - startedAt,
      min_drain_ms: plan.minDrainMs,
      ...(context.statsCounted.length ? { counted_by_stats: context.statsCounted } : {}),
    });
    void drainBegins(this.#envoys.all()); // learns the listening ports before Envoy closes them
    for (const live of this.#envoys.all()) this.drainListenersOf(live);
    if (this.#deps.app.gone()) this.appsGone("lastcall exec");
    return plan;
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
    const floorLeftMs = Math.max(0, plan.startedAt + plan.minDrainMs - now);
    this.#log("apps_gone", { via, drain_ms: now - plan.startedAt, floor_left_ms: floorLeftMs });
    this.#floorCut.abort();
    void this.closeInbound(`apps gone (${via})`);
  }

  async #goneUnlessRunning(via: string): Promise<void> {
    if (!await this.#deps.app.running()) this.appsGone(via);
  }

  /** Stops taking new inbound requests on every live Envoy, once (`inbound_closed`). */
  closeInbound(why: string): Promise<void> {
    return this.#inbound.close(this.#envoys.all(), why);
  }

  /** Requests in flight on inbound listeners now (see inbound.ts). */
  inboundInflight(signal: AbortSignal): Promise<number | undefined> {
    return inboundInflight(this.#envoys.all(), (s) => this.measure(s), signal);
  }

  /** Asks one Envoy to drain its listeners (retried in the background until it answers). */
  drainListenersOf(live: LiveEnvoy): void {
    const plan = this.#plan;
    if (plan && this.#inbound.closed) void this.#inbound.closeOn(live);
    if (!plan || !live.ready || live.listenersDraining) return;
    if (!live.admin || live.adminHandedOver) {
      live.listenersDraining = true; // its child drained them (said once)
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
    await Promise.all(unready.map((l) => stopEnvoy(l.process, 1000, { log: this.#log })));
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
    const waitOver = new AbortController();
    void this.#deps.watch.sayWhileWaiting(plan, AbortSignal.any([ended.signal, waitOver.signal]));
    try {
      const waitForApp = (s: AbortSignal) => this.#deps.app.waitGone(s);
      const context = this.modeContext();
      const deps = {
        ...context,
        measure: (s: AbortSignal) => this.measure(s),
        waitForApp,
        undelivered: () => // the HTTP/2 connections waited for: the drained connection managers'
          undeliveredBy(this.#envoys.all(), context.statPrefixes)
            .then((left) => this.#deps.watch.sawUndelivered(left)),
        settled: (last: Settled) => void (this.#settled = last),
      };
      return await waitDrained(plan, deps, ended.signal);
    } finally {
      waitOver.abort();
      clearTimeout(timer);
    }
  }

  /**
   * Requests in flight now, read afresh. When the filter is in every listener, a pull: each
   * Envoy's filter reads its gauge (one read, however many stats Envoy has). Otherwise, for
   * listeners only Envoy's stats count, `downstream_rq_active` is read from the admin as well
   * (a walk of Envoy's stats); with a hot restart in progress (a child's stats import its
   * parent's) only the filters can be asked.
   */
  async measure(signal: AbortSignal, instances = this.#envoys.reporters()): Promise<number | undefined> {
    const all = this.#envoys.all().filter((l) => l.process.running);
    if (all.length === 0) return 0;
    const context = this.modeContext();
    const pullable = this.#filtered && instances.length > 0 && all.every((l) => l.reporters.length > 0);
    // Envoy's stats can be read from one Envoy only (a child's stats import its parent's).
    const only = all.length === 1 && !all[0].adminHandedOver ? all[0] : undefined;
    const admin = only?.admin;
    if (pullable && (context.statsCounted.length === 0 || !admin)) return await this.#tracker.pull(instances, signal);
    if (!only || !admin) return undefined;
    const stats = parseStatsJson(await admin.stats(`^wasmcustom\\.${GAUGE_NAMES}$|downstream_rq_active$`, signal));
    if (!pullable) return activeRequests(stats, context.statPrefixes);
    const gauge = stats.filter((s) => isInflightGauge(s.name)).reduce((sum, s) => sum + s.value, 0);
    const filtered = new Set(only.bootstrap.filteredStatPrefixes); // the gauge counts these already
    return gauge + activeRequests(stats) - activeRequests(stats, filtered);
  }

  /**
   * Stops every live Envoy within what is left of the grace period, after reading from Envoy
   * what is still in flight (the truth of `inflight_at_stop`).
   */
  async stop(plan: DrainPlan): Promise<StopOutcome> {
    // Everything from here fits in what is left of the grace period (less a little for exiting).
    const graceEnd = (plan.terminatedAt ?? plan.startedAt) + this.#o.graceMs - 300;
    const { inflight: inflightAtStop, bytesUnsent, unchecked } = await this.#readingAtStop(graceEnd);
    const stopBudget = () => Math.max(200, graceEnd - Date.now());
    const targets = this.#envoys.all().filter((l) => l.process.running);
    for (const l of targets) this.#deps.retiring.add(l.info.instance);
    // The newest Envoy of each generation first: its shutdown ends its hot-restart parent (which
    // Envoy requires: a parent stopped first makes the child abort as it shuts down); whatever
    // still runs after that is stopped next.
    const newest = targets.filter((l) => !targets.some((o) => o.info.generation === l.info.generation && o.info.epoch > l.info.epoch));
    const zero = this.#settled?.inflight === 0 ? this.#settled.at : undefined;
    const lastZeroToStopMs = zero === undefined ? undefined : Date.now() - zero;
    const stop = (all: LiveEnvoy[], budgetMs: number) =>
      Promise.all(all.map((l) => stopEnvoy(l.process, budgetMs, { admin: l.adminHandedOver ? undefined : l.admin, log: this.#log })));
    await stop(newest, stopBudget() / 2);
    await stop(targets.filter((l) => l.process.running), stopBudget());
    return { inflightAtStop, bytesUnsentAtStop: bytesUnsent, ...(unchecked ? { deliveryUnchecked: unchecked } : {}), ...(lastZeroToStopMs !== undefined ? { lastZeroToStopMs } : {}) };
  }

  // What is in flight and undelivered right before the stop. A wait that ended on a zero just now
  // has read both already: no second read in the tail.
  async #readingAtStop(graceEnd: number): Promise<Omit<Settled, "at">> {
    const settled = freshReading(this.#settled);
    if (settled) return settled;
    const measureMs = Math.floor(Math.max(50, Math.min(500, (graceEnd - Date.now()) / 4)));
    const [inflight, left] = await Promise.all([
      countNow((s) => this.measure(s), () => this.#tracker.inflight(this.#envoys.reporters()), measureMs),
      undeliveredBy(this.#envoys.all()),
    ]);
    return { inflight, ...deliveryReading(left) };
  }
}
