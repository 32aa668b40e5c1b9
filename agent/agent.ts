// The agent (SIGTERM path 2/3): owns the one agent state and runs the supervision loop as a
// race between what Envoy does (exits, becomes ready) and what lastcall is told (terminate,
// drain, reload). Long steps (a reload, a crash restart) run as tasks beside the loop, so a
// terminate is acted on at once and pre-empts them. Starting Envoys lives in envoys.ts, the
// termination steps in drain/shutdown.ts, the filter's reports in reports.ts.
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { delay, EventQueue } from "./async.ts";
import { RestartBudget, restartDelay } from "./backoff.ts";
import { prepareBootstrap } from "./bootstrap-file.ts";
import { InflightTracker } from "./drain/in-flight.ts";
import type { ModeContext } from "./drain/modes/context.ts";
import { DrainEnded, drainListeners, type DrainPlan, stopEnvoys, waitDrained } from "./drain/shutdown.ts";
import { activeRequests, parseStatsJson } from "./envoy/stats.ts";
import { bindFailure, describeExit, type EnvoyExit } from "./envoy/process.ts";
import { Envoys, type LiveEnvoy } from "./envoys.ts";
import { EXIT, StartError } from "./errors.ts";
import { filterWasmPath } from "./filter-asset.ts";
import { watchHealth } from "./health.ts";
import type { EventLog } from "./log.ts";
import type { RunOptions } from "./options.ts";
import { ReportDesk } from "./reports.ts";
import { createStatusApp, type ReadinessAnswer } from "./server/app.ts";
import { listen, type StatusServer } from "./server/listen.ts";
import { createMetrics } from "./server/metrics.ts";
import { type AgentState, initialState } from "./state.ts";
import { watchFiles } from "./watch.ts";

export { EXIT, StartError };

type AgentEvent =
  | { type: "exited"; instance: string; exit: EnvoyExit }
  | { type: "restart_due" }
  | { type: "reload"; reason: string }
  | { type: "drain" }
  | { type: "terminate"; source: string }
  | { type: "done"; code: number }
  | { type: "fatal"; error: unknown };

/** Rejects with the signal's reason when it aborts before `promise` settles. */
function unlessAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

/**
 * Supervises Envoy for its whole life.
 *
 * @example
 * ```ts
 * const agent = new Agent(options, createEventLog("json"), "/usr/bin/envoy");
 * onSignal("SIGTERM", () => agent.terminate("SIGTERM"));
 * process.exitCode = await agent.run();
 * ```
 */
export class Agent {
  readonly #options: RunOptions;
  readonly #log: EventLog;
  readonly #envoyBinary: string;
  readonly #state: AgentState = initialState();
  readonly #events = new EventQueue<AgentEvent>();
  readonly #tracker: InflightTracker;
  readonly #desk: ReportDesk;
  readonly #budget: RestartBudget;
  /** Secret the filter sends with its reports: anything else on the status port is refused. */
  readonly #reportToken = randomBytes(24).toString("hex");
  /** Envoys being stopped on purpose: their exit is no crash. */
  readonly #retiring = new Set<string>();
  /** Reporters of Envoys drained before a cold reload stops them. */
  readonly #coldDraining = new Set<string>();
  readonly #stopNow = new AbortController();
  readonly #closing = new AbortController();
  #taskAbort = new AbortController();
  #tasks: Promise<void> = Promise.resolve();
  #envoys!: Envoys;
  #runDir = "";
  #ownRunDir = false;
  #filterWasm?: string;
  #server?: StatusServer;
  #unwatch?: () => void;
  #terminateSources: string[] = [];
  #terminating = false;
  #drainPlan?: DrainPlan;
  #restartAttempt = 0;
  #failure?: string;

  constructor(options: RunOptions, log: EventLog, envoyBinary: string) {
    this.#options = options;
    this.#log = log;
    this.#envoyBinary = envoyBinary;
    this.#tracker = new InflightTracker({ heartbeatMs: options.heartbeatMs });
    this.#desk = new ReportDesk(this.#tracker, {
      heartbeatMs: options.heartbeatMs,
      draining: (instance) => this.#drainPlan !== undefined || this.#coldDraining.has(instance),
    });
    this.#budget = new RestartBudget(options.restartBudget);
  }

  /** The port the status server listens on, once started. */
  get statusPort(): number | undefined {
    return this.#server?.port;
  }

  /** Why `run` returned {@linkcode EXIT.envoyGaveUp}, naming the last Envoy exit. */
  get failure(): string | undefined {
    return this.#failure;
  }

  /** SIGTERM, SIGINT, `POST /quitquitquit`: run the termination sequence, then exit. */
  terminate(source: string): void {
    const first = this.#terminateSources.length === 0;
    const secondInterrupt = source === "SIGINT" && this.#terminateSources.includes("SIGINT");
    this.#terminateSources.push(source);
    if (first) return this.#events.push({ type: "terminate", source });
    if (secondInterrupt) {
      this.#log("stop_now", { source });
      this.#stopNow.abort();
      return;
    }
    this.#log("terminate_ignored", { source, reason: "already terminating" });
  }

  /** SIGHUP or a watched file: validate the config again and start a new epoch. */
  reload(reason: string): void {
    this.#events.push({ type: "reload", reason });
  }

  /** `POST /drain`: steps 1–4 of the termination sequence, without exiting. */
  drain(): void {
    this.#events.push({ type: "drain" });
  }

  /** Runs until terminated or Envoy gives up; returns the process exit code. */
  async run(): Promise<number> {
    try {
      await this.#prepare();
      watchHealth(() => this.#envoys.all(), this.#log, this.#closing.signal);
      this.#task((signal) => this.#startEnvoy("start", false, signal).then(() => {}), true);
      for (;;) {
        const event = await this.#events.next();
        switch (event.type) {
          case "exited":
            this.#onExit(event.instance, event.exit);
            break;
          case "restart_due":
            if (!this.#terminating && this.#state.phase === "restarting") this.#task((s) => this.#restartAfterCrash(s));
            break;
          case "reload":
            if (this.#terminating) this.#log("reload_skipped", { reason: event.reason, why: "terminating" });
            else this.#task((s) => this.#reload(event.reason, s));
            break;
          case "drain":
            // Steps 1–5 without the stop: the wait is logged (`drain_wait_done`), Envoy runs on.
            if (!this.#drainPlan && !this.#terminating) void this.#waitDrained(this.#startDrain("POST /drain"));
            break;
          case "terminate":
            this.#terminating = true;
            this.#terminate(event.source).then(
              (code) => this.#events.push({ type: "done", code }),
              (error) => this.#events.push({ type: "fatal", error }),
            );
            break;
          case "done":
            return event.code;
          case "fatal":
            throw event.error;
        }
      }
    } finally {
      await this.#close();
    }
  }

  /** Runs `step` after the tasks before it; a terminate aborts it. Failures of `fatal` steps end the run. */
  #task(step: (signal: AbortSignal) => Promise<void>, fatal = false): void {
    const signal = this.#taskAbort.signal;
    this.#tasks = this.#tasks.then(async () => {
      if (signal.aborted) return;
      try {
        await step(signal);
      } catch (error) {
        if (signal.aborted) return;
        if (fatal) this.#events.push({ type: "fatal", error });
        else this.#log("task_failed", { error: String(error) });
      }
    });
  }

  // ---- start-up ----------------------------------------------------------------------------

  async #prepare(): Promise<void> {
    const o = this.#options;
    this.#ownRunDir = o.runDir === undefined;
    this.#runDir = o.runDir ?? await mkdtemp(join(tmpdir(), "lastcall-"));
    this.#envoys = new Envoys(o, this.#envoyBinary, this.#runDir);
    if (o.filter) this.#filterWasm = await filterWasmPath(o.filterWasm, this.#runDir);
    const metrics = createMetrics({
      state: () => this.#state,
      inflight: () => this.#tracker.inflight(this.#envoys.reporters()),
      ready: () => this.#servingReady() !== undefined,
      reports: () => ({ accepted: this.#reportsAccepted(), stale: this.#tracker.staleReports }),
      xds: () => this.#envoys.xdsStats.snapshot(),
    });
    const app = createStatusApp({
      readiness: () => this.#readiness(),
      state: () => this.snapshot(),
      metrics: () => metrics.metrics(),
      reportToken: this.#reportToken,
      report: (report) => this.#desk.answer(report),
      quit: () => this.terminate("POST /quitquitquit"),
      drain: () => this.drain(),
    });
    // A port already taken is a refusal at start (one line, exit 2), not a crash with a stack.
    this.#server = await listen(app, o.statusAddress, o.statusPort).catch((error: Error) => {
      throw new StartError(error.message);
    });
    if (o.watch.length > 0) {
      this.#unwatch = await watchFiles(o.watch, (paths) => this.reload(`changed: ${paths.join(", ")}`));
    }
  }

  #reportsAccepted(): number {
    let total = 0;
    for (const id of this.#envoys.reporters()) total += this.#tracker.view(id)?.reports ?? 0;
    return total;
  }

  /** Starts Envoy: epoch 0 of a new generation, or (hot) the next epoch of the current one. */
  async #startEnvoy(why: "start" | "restart" | "reload", hot: boolean, signal: AbortSignal): Promise<LiveEnvoy> {
    const { live, configChanged } = await this.#envoys.start({
      hot,
      statusPort: this.#server!.port,
      filterWasm: this.#filterWasm,
      reportToken: this.#reportToken,
      signal,
      xds: { log: this.#log, onReporter: (id) => this.#tracker.expect(id) },
    });
    if (configChanged) this.#budget.refill();
    for (const id of live.reporters) this.#tracker.expect(id);
    this.#syncState();
    if (this.#state.phase !== "draining" && this.#state.phase !== "stopping") this.#state.phase = "starting";
    live.process.exited.then((exit) => this.#events.push({ type: "exited", instance: live.info.instance, exit }));
    const b = live.bootstrap;
    this.#log(why === "reload" ? "epoch" : why, {
      epoch: live.info.epoch,
      pid: live.info.pid,
      generation: live.info.generation,
      status_port: this.#server!.port,
      filter: this.#filterWasm ? b.filteredListeners : [],
      filter_tcp: this.#filterWasm ? b.tcpListeners : [],
      inbound: b.inboundListeners,
      ...(b.unseenListeners.length ? { counted_by_stats: b.unseenListeners } : {}),
      ...(b.xds?.relayed.length ? { xds: b.xds.relayed } : {}),
    });
    live.whenReady.then((ok) => ok && this.#onReady(live));
    return live;
  }

  #onReady(live: LiveEnvoy): void {
    this.#log("ready", { epoch: live.info.epoch, pid: live.info.pid, ms: Date.now() - live.startedAt, admin: live.info.adminUrl });
    this.#syncState();
    if (this.#envoys.newest() === live && this.#state.phase === "starting") this.#state.phase = "running";
    // An Envoy that starts during a drain (a crash restart after POST /drain) is drained too.
    if (this.#drainPlan) this.#drainListenersOf(live);
  }

  #syncState(): void {
    const all = this.#envoys.all();
    this.#state.epochs = all.map((l) => l.info);
    this.#state.current = this.#envoys.newest()?.info;
    this.#state.serving = this.#envoys.serving()?.info;
  }

  // ---- Envoy exits ---------------------------------------------------------------------------

  /** Handles an Envoy exit: a parent finishing, a stop we asked for, a failed reload, or a crash. */
  #onExit(instance: string, exit: EnvoyExit): void {
    const wasNewest = this.#envoys.newest()?.info.instance === instance;
    const live = this.#envoys.remove(instance);
    for (const id of live?.reporters ?? []) this.#tracker.retire(id);
    this.#syncState();
    const fields = { epoch: live?.info.epoch, pid: live?.info.pid, exit: describeExit(exit) };
    if (this.#retiring.delete(instance) || this.#terminating || !wasNewest) {
      this.#log("epoch_exit", fields);
      return;
    }
    this.#state.lastExitReason = `Envoy exited with ${describeExit(exit)}`;
    this.#log("exit", fields);
    const parent = this.#envoys.newest();
    if (parent) {
      // The child of a hot restart died; its parent still serves the last good config.
      this.#state.reloadsRejected++;
      this.#log("reload_rejected", { epoch: live?.info.epoch, reason: "new epoch exited", serving_epoch: parent.info.epoch });
      return;
    }
    const bind = live && !live.ready ? bindFailure(live.process.recentOutput()) : undefined;
    if (bind) {
      const error = new StartError(`Envoy cannot listen on ${bind.address} (is the port taken?); Envoy said: ${bind.line}`);
      this.#events.push({ type: "fatal", error });
      return;
    }
    this.#crashed(describeExit(exit), Date.now() - (live?.startedAt ?? 0));
  }

  /** Spends the budget on a failed run and schedules the next start, or gives up. */
  #crashed(lastExit: string, ranMs: number): void {
    const attempt = this.#budget.spend(ranMs);
    if (attempt === undefined) {
      this.#state.phase = "stopped";
      this.#failure = `Envoy kept exiting (last: ${lastExit}); restart budget of ${this.#budget.limit} spent`;
      this.#log("gave_up", { restarts: this.#budget.spent, last_exit: lastExit, message: this.#failure });
      this.#events.push({ type: "done", code: EXIT.envoyGaveUp });
      return;
    }
    this.#restartAttempt = attempt;
    const delayMs = restartDelay(attempt);
    this.#state.phase = "restarting";
    this.#log("restart_scheduled", { attempt, delay_ms: delayMs, last_exit: lastExit });
    delay(delayMs, this.#closing.signal).then(() => this.#events.push({ type: "restart_due" }), () => {});
  }

  /** Starts Envoy again after a crash; a start that fails counts as one more crash. */
  async #restartAfterCrash(signal: AbortSignal): Promise<void> {
    this.#state.restarts++;
    try {
      await this.#startEnvoy("restart", false, signal);
    } catch (error) {
      if (signal.aborted) return;
      this.#log("restart_failed", { attempt: this.#restartAttempt, error: (error as Error).message, details: (error as StartError).details ?? [] });
      this.#crashed((error as Error).message, 0);
    }
  }

  // ---- reload ------------------------------------------------------------------------------

  async #reload(reason: string, signal: AbortSignal): Promise<void> {
    const newest = this.#envoys.newest();
    if (!newest || this.#drainPlan) {
      this.#log("reload_skipped", { reason, why: newest ? "draining" : "Envoy not running" });
      return;
    }
    this.#log("reload", { reason });
    // Envoy refuses a hot restart while the previous epoch is still initializing.
    if (!newest.ready) this.#log("reload_waiting", { reason, why: `epoch ${newest.info.epoch} is not ready yet` });
    await unlessAborted(newest.whenReady, signal);
    const serving = newest.info.epoch;
    try {
      if (this.#options.hotRestart) {
        await this.#startEnvoy("reload", true, signal);
        this.#state.hotRestarts++;
        return;
      }
      // Cold: validate the new config first (the old Envoy keeps serving if it is bad), then
      // drain the old Envoy, stop it, and start the new one.
      await prepareBootstrap(this.#envoyBinary, this.#options, {
        runDir: this.#runDir, name: "validate", epoch: 0, instance: "validate", statusPort: this.#server!.port,
        filterWasm: this.#filterWasm, reportToken: this.#reportToken, signal,
      });
      await this.#drainBeforeColdReload(signal);
      const old = this.#envoys.all();
      for (const l of old) this.#retiring.add(l.info.instance);
      await stopEnvoys(old.map((l) => ({ process: l.process, admin: l.adminHandedOver ? undefined : l.admin })), this.#log, 3000);
      await this.#startEnvoy("reload", false, signal);
    } catch (error) {
      if (signal.aborted) return;
      this.#state.reloadsRejected++;
      this.#log("reload_rejected", {
        reason,
        error: (error as Error).message,
        details: (error as StartError).details ?? [],
        serving_epoch: serving,
      });
    }
  }

  /** A cold reload leaves a gap: drain the old Envoy first, for at most `--drain-time`. */
  async #drainBeforeColdReload(signal: AbortSignal): Promise<void> {
    const old = this.#envoys.all();
    const reporters = old.flatMap((l) => l.reporters);
    for (const id of reporters) this.#coldDraining.add(id);
    this.#desk.drainStarted();
    const startedAt = Date.now();
    const plan: DrainPlan = {
      mode: this.#filterWasm && reporters.length > 0 ? "inflight" : "requests",
      scope: this.#options.drainScope,
      failHealthcheck: false,
      drainDelayMs: 0,
      minDrainMs: 0,
      startedAt,
      deadline: startedAt + this.#options.drainTimeMs,
    };
    const ended = new AbortController();
    const timer = setTimeout(() => ended.abort(new DrainEnded("deadline")), this.#options.drainTimeMs);
    signal.addEventListener("abort", () => ended.abort(signal.reason), { once: true });
    try {
      for (const l of old) if (l.admin && !l.adminHandedOver) void drainListeners(plan, l.admin, this.#log, ended.signal);
      const reason = await waitDrained(plan, { ...this.#modeContext(() => reporters), measure: (s) => this.#measure(s) }, ended.signal);
      this.#log("reload_drained", { reason, ms: Date.now() - startedAt });
    } finally {
      clearTimeout(timer);
    }
    signal.throwIfAborted();
  }

  // ---- drain and terminate -----------------------------------------------------------------

  #modeContext(instances = () => this.#envoys.reporters()): ModeContext {
    const o = this.#options;
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
  #startDrain(source: string): DrainPlan {
    if (this.#drainPlan) return this.#drainPlan;
    const o = this.#options;
    const startedAt = Date.now();
    this.#state.drainStartedAt = startedAt; // step 1: /healthz/ready answers 503 from now on
    this.#state.phase = "draining";
    const plan: DrainPlan = {
      mode: o.drainMode,
      scope: o.drainScope,
      failHealthcheck: o.failHealthcheck,
      drainDelayMs: o.drainDelayMs,
      minDrainMs: o.minDrainMs,
      startedAt,
      deadline: startedAt + o.graceMs - o.stopMarginMs,
    };
    this.#drainPlan = plan;
    this.#desk.drainStarted();
    const context = this.#modeContext();
    this.#log("drain_start", {
      source,
      mode: plan.mode,
      scope: plan.scope,
      deadline_ms: plan.deadline - startedAt,
      min_drain_ms: plan.minDrainMs,
      ...(context.statsCounted.length ? { counted_by_stats: context.statsCounted } : {}),
    });
    for (const live of this.#envoys.all()) this.#drainListenersOf(live);
    return plan;
  }

  /** Asks one Envoy to drain its listeners (retried in the background until it answers). */
  #drainListenersOf(live: LiveEnvoy): void {
    const plan = this.#drainPlan;
    if (!plan || !live.ready || live.listenersDraining) return;
    if (!live.admin || live.adminHandedOver) {
      this.#log("listeners_not_drained", { epoch: live.info.epoch, pid: live.info.pid, why: "its admin went to a hot-restart child" });
      return;
    }
    live.listenersDraining = true;
    const gone = new AbortController();
    live.process.exited.then(() => gone.abort());
    void drainListeners(plan, live.admin, this.#log, AbortSignal.any([gone.signal, this.#closing.signal]));
  }

  async #terminate(source: string): Promise<number> {
    this.#log("terminate", { source });
    const plan = this.#startDrain(source);
    // Pre-empt a reload or a crash restart in progress: it gives up at once.
    this.#taskAbort.abort(new Error("terminating"));
    await this.#tasks;
    const hadEnvoy = this.#envoys.all().some((l) => l.process.running);
    await this.#stopUnready();
    if (!this.#envoys.all().some((l) => l.process.running)) {
      this.#state.phase = "stopped";
      const reason = hadEnvoy ? "envoy_not_ready" : "envoy_not_running";
      this.#log("terminated", { mode: this.#options.drainMode, reason, drain_ms: Date.now() - plan.startedAt, inflight_at_stop: 0 });
      this.#state.termination = { mode: this.#options.drainMode, reason, drainMs: Date.now() - plan.startedAt, inflightAtStop: 0 };
      return EXIT.ok;
    }
    const reason = await this.#waitDrained(plan);
    this.#state.phase = "stopping";
    // Everything from here fits in what is left of the grace period (less a little for exiting).
    const graceEnd = plan.startedAt + this.#options.graceMs - 300;
    const measureMs = Math.floor(Math.max(50, Math.min(500, (graceEnd - Date.now()) / 4)));
    const inflightAtStop = await this.#measure(AbortSignal.timeout(measureMs))
      .catch(() => undefined) ?? this.#tracker.inflight(this.#envoys.reporters());
    const stopBudget = Math.max(200, graceEnd - Date.now());
    const targets = this.#envoys.all().filter((l) => l.process.running);
    for (const l of targets) this.#retiring.add(l.info.instance);
    await stopEnvoys(targets.map((l) => ({ process: l.process, admin: l.adminHandedOver ? undefined : l.admin })), this.#log, stopBudget);
    const summary = { mode: this.#options.drainMode, reason, drainMs: Date.now() - plan.startedAt, inflightAtStop };
    this.#state.termination = summary;
    this.#state.phase = "stopped";
    this.#log("terminated", { mode: summary.mode, reason, drain_ms: summary.drainMs, inflight_at_stop: inflightAtStop });
    return EXIT.ok;
  }

  /**
   * A terminate while no Envoy serves yet (the first one still INITIALIZING, a crash restart
   * starting) stops them at once: they have taken no traffic. A hot-restart child that is not
   * ready is left alone until its parent is drained: stopping it makes the parent exit too
   * (Envoy's hot-restart shutdown), cutting what the parent still serves.
   */
  async #stopUnready(): Promise<void> {
    const all = this.#envoys.all().filter((l) => l.process.running);
    await Promise.all(all.filter((l) => !l.ready && l.admin).map(async (l) => {
      if ((await l.admin!.readiness(250)).live) l.ready = true; // it became ready just now
    }));
    for (const l of all) if (l.ready) this.#drainListenersOf(l);
    const unready = all.filter((l) => !l.ready);
    if (unready.length === 0) return;
    if (all.some((l) => l.ready)) {
      this.#log("unready_epoch_kept", { epochs: unready.map((l) => l.info.epoch), why: "stopping it would stop the serving parent; it stops after the drain" });
      return;
    }
    this.#log("stopping_unready", { epochs: unready.map((l) => l.info.epoch), pids: unready.map((l) => l.info.pid) });
    for (const l of unready) this.#retiring.add(l.info.instance);
    await stopEnvoys(unready.map((l) => ({ process: l.process })), this.#log, 1000);
    this.#syncState();
  }

  /** Step 5 within the deadline; `stopped_now` on a second SIGINT, `envoy_exited` if all are gone. */
  async #waitDrained(plan: DrainPlan): Promise<string> {
    const ended = new AbortController();
    const end = (reason: DrainEnded["reason"]) => () => ended.abort(new DrainEnded(reason));
    const timer = setTimeout(end("deadline"), Math.max(0, plan.deadline - Date.now()));
    this.#stopNow.signal.addEventListener("abort", end("stopped_now"), { once: true });
    if (this.#stopNow.signal.aborted) end("stopped_now")();
    const running = this.#envoys.all().filter((l) => l.process.running);
    Promise.all(running.map((l) => l.process.exited)).then(end("envoy_exited"));
    try {
      return await waitDrained(plan, { ...this.#modeContext(), measure: (s) => this.#measure(s) }, ended.signal);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Requests in flight now, from Envoy itself: the filter's gauge (an upper bound of its exact
   * counter) plus, for listeners the filter is not in, `downstream_rq_active`. With a hot restart
   * in progress (a child's stats import its parent's) the filters' latest reports are used.
   */
  async #measure(signal: AbortSignal): Promise<number | undefined> {
    const all = this.#envoys.all().filter((l) => l.process.running);
    if (all.length === 0) return 0;
    const only = all.length === 1 ? all[0] : undefined;
    if (!only?.admin || only.adminHandedOver) {
      const ids = this.#envoys.reporters();
      return ids.length > 0 && ids.every((id) => this.#tracker.view(id)) ? this.#tracker.inflight(ids) : undefined;
    }
    const context = this.#modeContext();
    const stats = parseStatsJson(await only.admin.stats("^wasmcustom\\.lastcall_inflight$|downstream_rq_active$", signal));
    if (!this.#filterWasm || only.reporters.length === 0) return activeRequests(stats, context.statPrefixes);
    const gauge = stats.find((s) => s.name === "wasmcustom.lastcall_inflight")?.value ?? 0;
    if (context.statsCounted.length === 0) return gauge;
    const filtered = new Set(only.bootstrap.inboundStatPrefixes);
    return gauge + activeRequests(stats) - activeRequests(stats, filtered);
  }

  // ---- status ------------------------------------------------------------------------------

  /** The Envoy that serves, when it is ready and answering and no drain began. */
  #servingReady(): LiveEnvoy | undefined {
    if (this.#state.drainStartedAt !== undefined) return undefined;
    const serving = this.#envoys.serving();
    return serving && !serving.hung ? serving : undefined;
  }

  async #readiness(): Promise<ReadinessAnswer> {
    if (this.#state.drainStartedAt !== undefined) return { ready: false, reason: "draining" };
    const serving = this.#envoys.serving();
    if (serving?.hung) return { ready: false, reason: `Envoy epoch ${serving.info.epoch} (pid ${serving.info.pid}) is not answering its admin` };
    if (serving) return { ready: true, reason: "LIVE" };
    const newest = this.#envoys.newest();
    if (!newest) {
      return { ready: false, reason: this.#state.lastExitReason ? `Envoy restarting: ${this.#state.lastExitReason}` : "Envoy not started" };
    }
    if (!newest.admin) return { ready: false, reason: `Envoy epoch ${newest.info.epoch} starting: admin address not yet known` };
    const readiness = await newest.admin.readiness(1000);
    return { ready: false, reason: readiness.reason ?? readiness.state };
  }

  /** A copy of the state with the in-flight view, for `/v1/state`. */
  snapshot(): AgentState & { inflight: number; filter: string } {
    const reporters = this.#envoys.serving()?.reporters ?? this.#envoys.newest()?.reporters ?? [];
    return {
      ...structuredClone(this.#state),
      inflight: this.#tracker.inflight(this.#envoys.reporters()),
      filter: !this.#filterWasm ? "disabled" : reporters.length === 0 ? "not inserted" : this.#tracker.status(reporters[0]),
    };
  }

  async #close(): Promise<void> {
    this.#closing.abort();
    this.#taskAbort.abort();
    this.#unwatch?.();
    const remaining = this.#envoys?.all().filter((l) => l.process.running) ?? [];
    await Promise.all(remaining.map((l) => l.process.stop(2000)));
    await this.#envoys?.close();
    await this.#server?.close();
    if (this.#ownRunDir && this.#runDir) await rm(this.#runDir, { recursive: true, force: true }).catch(() => {});
  }
}
