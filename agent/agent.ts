// The agent (SIGTERM path 2/4): owns the one agent state and runs the supervision loop as a
// race between what Envoy does (exits, becomes ready) and what lastcall is told (terminate,
// drain, reload). Long steps (a reload, a crash restart) run as tasks beside the loop, so a
// terminate is acted on at once and pre-empts them. The rooms: supervise/ (the Envoy processes,
// their bootstrap, health, reloads, the app beside them), drain/ (the termination and the drains
// of old epochs), status/ (the status server, the filter's reports, control), lib/.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { EventQueue } from "./lib/async.ts";
import { CrashRestarts } from "./supervise/crash-restarts.ts";
import { prepareBootstrap } from "./supervise/bootstrap-file.ts";
import { InflightTracker } from "./drain/in-flight.ts";
import { HolderBook } from "./drain/holders.ts";
import { DrainWatch } from "./drain/waiting.ts";
import { Drainer, undeliveredBy } from "./drain/drainer.ts";
import { AppStopGate } from "./drain/app-stop.ts";
import { type DiedDraining, terminate } from "./drain/terminate.ts";
import { reload, type ReloadContext } from "./supervise/reload.ts";
import { bindFailure, describeExit, type EnvoyExit, stopEnvoy } from "./envoy/process.ts";
import { identifyEnvoy } from "./envoy/identify.ts";
import { Envoys, type LiveEnvoy, startFields } from "./supervise/envoys.ts";
import { EXIT, StartError } from "./lib/errors.ts";
import { filterWasmPath } from "./supervise/filter-asset.ts";
import { AppWatch } from "./supervise/app-watch.ts";
import { watchHealth } from "./supervise/health.ts";
import type { EventLog } from "./lib/log.ts";
import type { RunOptions } from "./options.ts";
import { ReportDesk } from "./status/reports.ts";
import { DrainMetrics } from "./drain/drain-metrics.ts";
import { prepareRunDir } from "./supervise/run-dir.ts";
import type { StatusServer } from "./status/listen.ts";
import { createReportToken } from "./status/report-token.ts";
import { type AgentState, initialState } from "./state.ts";
import { serveStatus, type StatusView } from "./status/serve.ts";
import { watchFiles } from "./lib/watch.ts";

export { EXIT, StartError };

type AgentEvent =
  | { type: "exited"; instance: string; exit: EnvoyExit }
  | { type: "restart_due" }
  | { type: "reload"; reason: string }
  | { type: "drain"; nativeSidecar: boolean }
  | { type: "terminate"; source: string }
  | { type: "done"; code: number }
  | { type: "fatal"; error: unknown };

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
  /** What the filters' VMs said holds a drain. */
  readonly #holders = new HolderBook();
  readonly #crashes: CrashRestarts;
  readonly #app: AppWatch;
  /** How drains ended, for `/metrics`. */
  readonly #drains = new DrainMetrics();
  /** Secret the filter sends with its reports: anything else on the status port is refused. */
  readonly #reportToken = createReportToken();
  /** Envoys being stopped on purpose: their exit is no crash. */
  readonly #retiring = new Set<string>();
  readonly #stopNow = new AbortController();
  readonly #closing = new AbortController();
  #taskAbort = new AbortController();
  #tasks: Promise<void> = Promise.resolve();
  #envoys!: Envoys;
  /** `envoy --version` (identify.ts): settles before the first Envoy starts. */
  #identified: Promise<unknown> = Promise.resolve();
  #runDir = "";
  #ownRunDir = false;
  #filterWasm?: string;
  #server?: StatusServer;
  #unwatch?: () => void;
  #terminateSources: string[] = [];
  #terminating = false;
  /** A reload waits its turn (it reads the config when it starts): SIGHUPs meanwhile join it. */
  #reloadQueued = false;
  #drainer!: Drainer;
  /** Answers the app containers' preStop hooks (`GET /v1/app-stop`). */
  #appStop!: AppStopGate;
  #failure?: string;
  /** Envoys that exited by themselves during the termination: what they had in flight, and how they ended. */
  readonly #diedDraining: DiedDraining[] = [];

  constructor(options: RunOptions, log: EventLog, envoyBinary: string) {
    this.#options = options;
    this.#log = log;
    this.#envoyBinary = envoyBinary;
    this.#tracker = new InflightTracker({ heartbeatMs: options.heartbeatMs });
    this.#desk = new ReportDesk(this.#tracker, {
      heartbeatMs: options.heartbeatMs,
      draining: (instance) => this.#drainer?.isDraining(instance) ?? false,
      holders: this.#holders,
    });
    this.#crashes = new CrashRestarts({
      budget: options.restartBudget,
      log,
      state: this.#state,
      closing: this.#closing.signal,
      due: () => this.#events.push({ type: "restart_due" }),
      gaveUp: (message) => {
        this.#failure = message;
        this.#events.push({ type: "done", code: EXIT.envoyGaveUp });
      },
      start: (signal) => this.#startEnvoy("restart", false, signal),
    });
    this.#app = new AppWatch({ port: options.appPort }, log);
  }

  /** The port the status server listens on, once started. */
  get statusPort(): number | undefined {
    return this.#server?.port;
  }

  /** Why `run` returned {@linkcode EXIT.envoyGaveUp}, naming the last Envoy exit. */
  get failure(): string | undefined {
    return this.#failure;
  }

  /** SIGTERM, SIGINT, SIGQUIT, `POST /quitquitquit`: run the termination sequence, then exit. */
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

  /**
   * `POST /drain`: steps 1–4 of the termination sequence, without exiting. `nativeSidecar`: the
   * caller is a native sidecar's preStop, so a SIGTERM later means every app container exited.
   */
  drain(options: { nativeSidecar: boolean } = { nativeSidecar: false }): void {
    this.#events.push({ type: "drain", nativeSidecar: options.nativeSidecar });
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
            if (!this.#terminating && this.#state.phase === "restarting") this.#task((s) => this.#crashes.restart(s));
            break;
          case "reload":
            if (this.#terminating) this.#log("reload_skipped", { reason: event.reason, why: "terminating" });
            else if (this.#reloadQueued) this.#log("reload_coalesced", { reason: event.reason });
            else {
              // One reload waiting its turn reads the config when it starts: later ones join it.
              this.#reloadQueued = true;
              this.#task((s) => {
                this.#reloadQueued = false;
                return reload(this.#reloadContext(), event.reason, s);
              });
            }
            break;
          case "drain":
            // Steps 1–5 without the stop (drainer.ts): Envoy runs on.
            if (this.#terminating) break;
            this.#drainer.drainInPlace(() => this.#terminating, event.nativeSidecar);
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
    // Asked while the bootstrap is derived and validated; Envoy starts only once it answered
    // (Envoys.start), and a binary that is not Envoy is the error reported.
    this.#identified = identifyEnvoy(this.#envoyBinary);
    this.#identified.catch(() => {}); // awaited by Envoys.start; #prepare may fail before that
    // A given folder is made fresh (an earlier lastcall's files removed, 0700): see run-dir.ts.
    if (o.runDir !== undefined) await prepareRunDir(o.runDir);
    this.#ownRunDir = o.runDir === undefined;
    this.#runDir = o.runDir ?? await mkdtemp(join(tmpdir(), "lastcall-"));
    this.#envoys = new Envoys(o, this.#envoyBinary, this.#runDir);
    if (o.filter) this.#filterWasm = await filterWasmPath(o.filterWasm, this.#runDir);
    this.#drainer = new Drainer({
      options: o,
      log: this.#log,
      envoys: this.#envoys,
      tracker: this.#tracker,
      tellFilters: () => this.#desk.drainStarted(),
      app: this.#app,
      filtered: this.#filterWasm !== undefined,
      retiring: this.#retiring,
      stopNow: this.#stopNow.signal,
      closing: this.#closing.signal,
      onStart: (plan) => {
        this.#state.drainStartedAt = plan.startedAt;
        this.#state.phase = "draining";
        this.#appStop.drainBegan();
      },
      drains: this.#drains,
      watch: new DrainWatch({ envoys: this.#envoys, tracker: this.#tracker, holders: this.#holders, app: this.#app, log: this.#log }),
    });
    this.#appStop = new AppStopGate({
      plan: () => this.#drainer.plan,
      inboundInflight: (signal) => this.#drainer.inboundInflight(signal),
      closeInbound: (why) => this.#drainer.closeInbound(why),
      log: this.#log,
      closing: this.#closing.signal,
    });
    this.#server = await serveStatus(o.statusAddress, o.statusPort, {
      view: () => this.#statusView(),
      desk: this.#desk,
      app: this.#app,
      reportToken: this.#reportToken,
      quit: () => this.terminate("POST /quitquitquit"),
      drain: (options) => this.drain(options),
      appStop: () => this.#appStop.answer(),
      drains: this.#drains,
    });
    if (o.watch.length > 0) {
      this.#unwatch = await watchFiles(o.watch, (paths) => this.reload(`changed: ${paths.join(", ")}`));
    }
  }

  /** Starts Envoy: epoch 0 of a new generation, or (hot) the next epoch of the current one. */
  async #startEnvoy(why: "start" | "restart" | "reload", hot: boolean, signal: AbortSignal): Promise<LiveEnvoy> {
    const { live, configChanged } = await this.#envoys.start({
      hot,
      statusPort: this.#server!.port,
      filterWasm: this.#filterWasm,
      reportToken: this.#reportToken,
      signal,
      identified: this.#identified,
      xds: { log: this.#log, onReporter: (id) => this.#tracker.expect(id) },
    });
    if (configChanged) this.#crashes.refill();
    for (const id of live.reporters) this.#tracker.expect(id);
    this.#syncState();
    if (this.#state.phase !== "draining" && this.#state.phase !== "stopping") this.#state.phase = "starting";
    live.process.exited.then((exit) => this.#events.push({ type: "exited", instance: live.info.instance, exit }));
    this.#log(why === "reload" ? "epoch" : why, { ...startFields(live, this.#filterWasm !== undefined), status_port: this.#server!.port });
    live.whenReady.then((ok) => ok && this.#onReady(live));
    return live;
  }

  #onReady(live: LiveEnvoy): void {
    void undeliveredBy([live]); // learns its listening ports while they are open
    this.#log("ready", { epoch: live.info.epoch, pid: live.info.pid, ms: Date.now() - live.startedAt, admin: live.info.adminUrl });
    this.#syncState();
    if (this.#envoys.newest() === live && this.#state.phase === "starting") this.#state.phase = "running";
    // An Envoy that starts during a drain (a crash restart after POST /drain) is drained too.
    if (this.#drainer.plan) this.#drainer.drainListenersOf(live);
    // A hot restart's child serves: its parents finish what they have, then lastcall stops them.
    const parents = this.#envoys.all().filter((l) => l !== live && l.info.generation === live.info.generation && l.info.epoch < live.info.epoch && l.process.running);
    if (parents.length > 0 && !this.#terminating) {
      this.#drainer.finishOld(parents, "hot", this.#closing.signal).catch((error) => this.#log("epoch_drain_failed", { error: String(error) }));
    }
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
    const inflightBefore = this.#tracker.inflight(live?.reporters ?? []);
    for (const id of live?.reporters ?? []) {
      this.#tracker.retire(id);
      this.#holders.forget(id);
    }
    this.#syncState();
    const fields = { epoch: live?.info.epoch, pid: live?.info.pid, exit: describeExit(exit), ...live?.drained };
    const asked = this.#retiring.delete(instance);
    if (!asked && this.#terminating) {
      // Killed under the drain (the OOM killer, a kill -9): what it held is lost, and said so.
      this.#diedDraining.push({ inflight: inflightBefore, exit: describeExit(exit) });
      this.#log("epoch_exit", { ...fields, unexpected: true, inflight_at_exit: inflightBefore });
      return;
    }
    if (asked || !wasNewest) {
      this.#log("epoch_exit", { ...fields, ...(!asked && inflightBefore > 0 ? { inflight_at_exit: inflightBefore } : {}) });
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
    this.#crashes.crashed(describeExit(exit), Date.now() - (live?.startedAt ?? 0));
  }

  // ---- reload ------------------------------------------------------------------------------

  #reloadContext(): ReloadContext {
    return {
      options: this.#options,
      log: this.#log,
      state: this.#state,
      envoys: this.#envoys,
      draining: () => this.#drainer.plan !== undefined,
      finishOld: (old, kind, signal) => this.#drainer.finishOld(old, kind, signal),
      oldFinished: () => this.#drainer.oldFinished(),
      start: (hot, signal) => this.#startEnvoy("reload", hot, signal),
      validate: (signal) =>
        prepareBootstrap(this.#envoyBinary, this.#options, {
          runDir: this.#runDir, name: "validate", epoch: 0, instance: "validate", statusPort: this.#server!.port,
          filterWasm: this.#filterWasm, reportToken: this.#reportToken, signal,
        }).then(() => {}),
    };
  }

  // ---- terminate ---------------------------------------------------------------------------

  #terminate(source: string): Promise<number> {
    return terminate({
      options: this.#options,
      log: this.#log,
      state: this.#state,
      envoys: this.#envoys,
      drainer: this.#drainer,
      // Pre-empt a reload or a crash restart in progress: it gives up at once.
      preempt: () => {
        this.#taskAbort.abort(new Error("terminating"));
        return this.#tasks;
      },
      syncState: () => this.#syncState(),
      died: this.#diedDraining,
      drains: this.#drains,
    }, source);
  }

  // ---- status ------------------------------------------------------------------------------

  #statusView(): StatusView {
    return { state: this.#state, envoys: this.#envoys, tracker: this.#tracker, filtered: this.#filterWasm !== undefined, drain: () => this.#drainer.view() };
  }

  async #close(): Promise<void> {
    this.#closing.abort();
    this.#taskAbort.abort();
    this.#unwatch?.();
    const remaining = this.#envoys?.all().filter((l) => l.process.running) ?? [];
    await Promise.all(remaining.map((l) => stopEnvoy(l.process, 2000)));
    await this.#envoys?.close();
    await this.#server?.close();
    if (this.#ownRunDir && this.#runDir) await rm(this.#runDir, { recursive: true, force: true }).catch(() => {});
  }
}
