// The agent: owns the one agent state and runs the supervision loop, a race between what Envoy
// does (exits, becomes ready) and what lastcall is told (terminate, drain, reload). The
// termination itself is drain/termination.ts; docs/architecture.md draws the whole path.
import { rm } from "node:fs/promises";
import { EventQueue } from "./lib/async.ts";
import { CrashRestarts } from "./supervise/crash-restarts.ts";
import { InflightTracker } from "./drain/in-flight.ts";
import { learnListening } from "./drain/delivery.ts";
import type { DrainRequest } from "./drain/plan.ts";
import { terminate, type TerminationOutcome } from "./drain/termination.ts";
import { reload, type ReloadContext } from "./supervise/reload.ts";
import { bindFailure, describeExit, type EnvoyExit, stopEnvoy } from "./envoy/process.ts";
import { type Epoch, startFields } from "./supervise/envoys.ts";
import { TaskChain } from "./supervise/tasks.ts";
import { EXIT, StartError } from "./lib/errors.ts";
import { AppWatch } from "./supervise/app-watch.ts";
import { watchHealth } from "./supervise/health.ts";
import type { EventLog } from "./lib/log.ts";
import type { RunOptions } from "./options.ts";
import { type AgentState, initialState } from "./state.ts";
import { onSignal } from "./runtime/process.ts";
import { prepareRun, type Running } from "./prepare.ts";
import type { BoundServer } from "./status/listen.ts";

export { EXIT, StartError };

type AgentEvent =
  | { type: "exited"; instance: string; exit: EnvoyExit }
  | { type: "restart_due" }
  | { type: "reload"; reason: string }
  | { type: "drain"; request: DrainRequest }
  | { type: "terminate"; source: string; byApps?: boolean }
  | { type: "done"; code: number }
  | { type: "fatal"; error: unknown };

/**
 * Supervises Envoy for its whole life; SIGTERM, SIGINT, SIGQUIT terminate it, SIGHUP reloads.
 *
 * @example
 * ```ts
 * const status = await bindStatus(options.statusAddress, options.statusPort, { held: true });
 * const agent = new Agent(options, createEventLog("json"), "/usr/bin/envoy", status);
 * process.exitCode = await agent.run();
 * ```
 */
export class Agent {
  readonly #options: RunOptions;
  readonly #log: EventLog;
  readonly #envoyBinary: string;
  readonly #status: BoundServer;
  readonly #state: AgentState = initialState();
  readonly #events = new EventQueue<AgentEvent>();
  readonly #tracker: InflightTracker;
  readonly #crashes: CrashRestarts;
  readonly #app: AppWatch;
  readonly #closing = new AbortController();
  readonly #tasks: TaskChain;
  /** The termination's requests: their sources, whether it began, and the operator's insistence. */
  readonly #termination = { sources: [] as string[], began: false, stopNow: new AbortController() };
  #run?: Running;
  #failure?: string;

  constructor(options: RunOptions, log: EventLog, envoyBinary: string, status: BoundServer) {
    this.#options = options;
    this.#log = log;
    this.#envoyBinary = envoyBinary;
    this.#status = status;
    this.#tracker = new InflightTracker({ heartbeatMs: options.heartbeatMs });
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
    this.#tasks = new TaskChain(log, (error) => this.#events.push({ type: "fatal", error }));
  }

  /** The port the status server listens on, once started. */
  get statusPort(): number | undefined {
    return this.#run?.server.port;
  }

  /** Why `run` returned {@linkcode EXIT.envoyGaveUp}, naming the last Envoy exit. */
  get failure(): string | undefined {
    return this.#failure;
  }

  /**
   * SIGTERM, SIGINT, SIGQUIT, `POST /quitquitquit`: run the termination, then exit. `byApps`: the
   * apps' preStop found nothing left for the proxy (`app-stop`): the drain's deadline holds.
   */
  terminate(source: string, byApps = false): void {
    const { sources, stopNow } = this.#termination;
    const first = sources.length === 0;
    const secondInterrupt = source === "SIGINT" && sources.includes("SIGINT");
    if (byApps && !first) return; // the termination under way ends the proxy already
    sources.push(source);
    if (first) return this.#events.push({ type: "terminate", source, byApps });
    if (secondInterrupt) {
      this.#log("stop_now", { source });
      stopNow.abort();
      return;
    }
    this.#log("terminate_ignored", { source, reason: "already terminating" });
  }

  /** SIGHUP or a watched file: validate the config again and start a new epoch. */
  reload(reason: string): void {
    this.#events.push({ type: "reload", reason });
  }

  /**
   * `POST /drain`: the termination's drain (drain/termination.ts) without the stop.
   * `nativeSidecar`: the caller is a native sidecar's preStop, so a SIGTERM later means every app
   * container exited.
   */
  drainInPlace(request: DrainRequest = { nativeSidecar: false }): void {
    this.#events.push({ type: "drain", request });
  }

  /** Runs until terminated or Envoy gives up; returns the process exit code. */
  async run(): Promise<number> {
    const off = [
      onSignal("SIGTERM", () => this.terminate("SIGTERM")),
      onSignal("SIGINT", () => this.terminate("SIGINT")),
      onSignal("SIGQUIT", () => this.terminate("SIGQUIT")),
      onSignal("SIGHUP", () => this.reload("SIGHUP")),
      // Said, and nothing else: no inspector, no exit (docs/operations.md, "Signals").
      onSignal("SIGUSR1", () => this.#log("signal_ignored", { signal: "SIGUSR1" })),
      // The native sidecar's preStop (`kill -USR2 1`): as `lastcall drain`, without a process.
      onSignal("SIGUSR2", () => this.drainInPlace({ nativeSidecar: true, source: "SIGUSR2" })),
    ];
    try {
      const run = this.#run = await prepareRun({
        options: this.#options,
        log: this.#log,
        envoyBinary: this.#envoyBinary,
        state: this.#state,
        tracker: this.#tracker,
        app: this.#app,
        closing: this.#closing.signal,
        status: this.#status,
      }, this);
      // As a drain begins (the termination, or POST /drain), readiness fails.
      void run.drainer.began.then((plan) => {
        this.#state.drainStartedAt = plan.startedAt;
        this.#state.phase = "draining";
      });
      watchHealth(() => run.envoys.all(), this.#log, this.#closing.signal);
      this.#tasks.run((signal) => this.#startEnvoy("start", false, signal).then(() => {}), {
        fatal: true,
      });
      for (;;) {
        const event = await this.#events.next();
        const terminating = this.#termination.began;
        switch (event.type) {
          case "exited":
            this.#onExit(event.instance, event.exit);
            break;
          case "restart_due":
            if (!terminating && this.#state.phase === "restarting") {
              this.#tasks.run((s) => this.#crashes.restart(s));
            }
            break;
          case "reload":
            if (terminating) {
              this.#log("reload_skipped", { reason: event.reason, why: "terminating" });
            } // One reload waiting its turn reads the config when it starts: later ones join it.
            else if (
              !this.#tasks.run((s) => reload(this.#reloadContext(run), event.reason, s), {
                key: "reload",
              })
            ) {
              this.#log("reload_coalesced", { reason: event.reason });
            }
            break;
          case "drain":
            if (!terminating) this.#drainInPlace(run, event.request);
            break;
          case "terminate":
            this.#termination.began = true;
            this.#terminate(run, event.source, event.byApps);
            break;
          case "done":
            return event.code;
          case "fatal":
            throw event.error;
        }
      }
    } finally {
      // Signals stay handled until lastcall has closed (a late SIGTERM is ignored, not fatal).
      await this.#close().finally(() => off.forEach((remove) => remove()));
    }
  }

  // ---- epochs: start, ready, exit ----------------------------------------------------------

  /** Starts Envoy: epoch 0 of a new generation, or (hot) the next epoch of the current one. */
  async #startEnvoy(
    why: "start" | "restart" | "reload",
    hot: boolean,
    signal: AbortSignal,
  ): Promise<Epoch> {
    const run = this.#run!;
    const { live, configChanged } = await run.envoys.start({
      hot,
      statusPort: run.server.port,
      filterWasm: run.filterWasm,
      reportToken: run.reportToken,
      signal,
      identify: run.identify,
      // The status server's handler loads beside Envoy's start (a probe waits for either).
      spawned: () => void this.#status.warm(),
      xds: { log: this.#log, onReporter: (id) => this.#tracker.expect(id) },
    });
    if (configChanged) this.#crashes.refill();
    for (const id of live.reporters) this.#tracker.expect(id);
    this.#syncState();
    if (this.#state.phase !== "draining" && this.#state.phase !== "stopping") {
      this.#state.phase = "starting";
    }
    live.process.exited.then((exit) =>
      this.#events.push({ type: "exited", instance: live.info.instance, exit })
    );
    this.#log(why === "reload" ? "epoch" : why, {
      ...startFields(live, run.filterWasm !== undefined),
      status_port: run.server.port,
    });
    live.whenReady.then((ok) => ok && this.#onReady(live));
    return live;
  }

  #onReady(live: Epoch): void {
    const { envoys, drainer, epochs, old } = this.#run!;
    void learnListening([live]); // while its listeners are open
    this.#log("ready", {
      epoch: live.info.epoch,
      pid: live.info.pid,
      ms: Date.now() - live.startedAt,
      admin: live.info.adminUrl,
    });
    this.#syncState();
    if (envoys.newest() === live && this.#state.phase === "starting") this.#state.phase = "running";
    // An epoch that starts during a drain (a crash restart after POST /drain) is drained too.
    if (drainer.plan) epochs.drainListeners(drainer.plan, [live]);
    // A hot restart's child serves: its parents finish what they have, then lastcall stops them.
    const parents = envoys.all().filter((l) =>
      l !== live && l.info.generation === live.info.generation && l.info.epoch < live.info.epoch &&
      l.process.running
    );
    if (parents.length > 0 && !this.#termination.began) {
      old.finish(parents, "hot", this.#closing.signal).catch((error) =>
        this.#log("epoch_drain_failed", { error: String(error) })
      );
    }
  }

  #syncState(): void {
    const envoys = this.#run!.envoys;
    this.#state.epochs = envoys.all().map((l) => l.info);
    this.#state.current = envoys.newest()?.info;
    this.#state.serving = envoys.serving()?.info;
  }

  /** Handles an epoch's exit: a parent finishing, a stop asked for, a failed reload, a crash. */
  #onExit(instance: string, exit: EnvoyExit): void {
    const { envoys, desk } = this.#run!;
    const wasNewest = envoys.newest()?.info.instance === instance;
    const live = envoys.remove(instance);
    const inflightBefore = this.#tracker.inflight(live?.reporters ?? []);
    for (const id of live?.reporters ?? []) desk.retire(id);
    this.#syncState();
    const fields = {
      epoch: live?.info.epoch,
      pid: live?.info.pid,
      exit: describeExit(exit),
      ...live?.drained,
    };
    const asked = live?.stopAsked === true;
    if (!asked && this.#termination.began) {
      // Killed under the drain (the OOM killer, a kill -9): what it held is lost, and said so.
      this.#log("epoch_exit", { ...fields, unexpected: true, inflight_at_exit: inflightBefore });
      return;
    }
    if (asked || !wasNewest) {
      this.#log("epoch_exit", {
        ...fields,
        ...(!asked && inflightBefore > 0 ? { inflight_at_exit: inflightBefore } : {}),
      });
      return;
    }
    this.#state.lastExitReason = `Envoy exited with ${describeExit(exit)}`;
    this.#log("exit", fields);
    const serving = envoys.newest();
    if (serving) {
      // The child of a hot restart died; its parent still serves the last good config.
      this.#state.reloadsRejected++;
      this.#log("reload_rejected", {
        epoch: live?.info.epoch,
        reason: "new epoch exited",
        serving_epoch: serving.info.epoch,
      });
      return;
    }
    const bind = live && !live.ready ? bindFailure(live.process.recentOutput()) : undefined;
    if (bind) {
      const error = new StartError(
        `Envoy cannot listen on ${bind.address} (is the port taken?); Envoy said: ${bind.line}`,
      );
      this.#events.push({ type: "fatal", error });
      return;
    }
    this.#crashes.crashed(describeExit(exit), Date.now() - (live?.startedAt ?? 0));
  }

  // ---- reload, drain, terminate --------------------------------------------------------------

  #reloadContext(run: Running): ReloadContext {
    return {
      options: this.#options,
      log: this.#log,
      state: this.#state,
      envoys: run.envoys,
      draining: () => run.drainer.plan !== undefined,
      finishOld: (old, kind, signal) =>
        run.old.finish(old, kind, AbortSignal.any([signal, this.#closing.signal])),
      oldFinished: () => run.old.finished(),
      start: (hot, signal) => this.#startEnvoy("reload", hot, signal),
      validate: (signal) => run.validate(signal),
    };
  }

  /** `POST /drain`: the drain begins and waits; Envoy runs on (nothing stopped, nothing cut). */
  #drainInPlace(run: Running, request: DrainRequest): void {
    const waiting = run.drainer.drainInPlace(request, this.#termination.stopNow.signal);
    if (!waiting) return;
    const { plan, ended } = waiting;
    const metered = run.drainMetrics.started("drain", () => plan.deadline);
    ended.then(
      (reason) =>
        metered.ended({ reason, drainMs: Date.now() - plan.startedAt, inflightAtStop: 0 }),
      () => metered.ended(),
    );
  }

  /**
   * Runs the termination (drain/termination.ts), pre-empting a reload or crash restart, and
   * applies its outcome.
   */
  #terminate(run: Running, source: string, byApps = false): void {
    const { drainer, epochs, drainMetrics, appStop } = run;
    const metered = drainMetrics.started("termination", () => drainer.plan?.deadline ?? Date.now());
    const preempted = this.#tasks.preempt(new Error("terminating"));
    const context = { log: this.#log, state: this.#state, drain: drainer, epochs, appStop };
    const stopNow = this.#termination.stopNow.signal;
    terminate(context, source, { preempted, stopNow, byApps }).then(
      (outcome: TerminationOutcome) => {
        const { reason, drainMs, inflightAtStop, bytesUnsentAtStop, lastZeroToStopMs } = outcome;
        metered.ended({
          reason,
          drainMs,
          inflightAtStop,
          ...(bytesUnsentAtStop !== undefined ? { bytesUnsent: bytesUnsentAtStop } : {}),
          ...(lastZeroToStopMs !== undefined ? { lastZeroToStopMs } : {}),
        });
        this.#state.termination = { mode: outcome.mode, reason, drainMs, inflightAtStop };
        this.#state.phase = "stopped";
        this.#events.push({ type: "done", code: outcome.code });
      },
      (error) => this.#events.push({ type: "fatal", error }),
    );
  }

  async #close(): Promise<void> {
    this.#closing.abort();
    void this.#tasks.preempt();
    const run = this.#run;
    run?.unwatch?.();
    await Promise.all(
      run?.envoys.all().filter((l) => l.process.running).map((l) => stopEnvoy(l.process, 2000)) ??
        [],
    );
    await run?.envoys.close();
    await run?.server.close();
    if (run?.runDir.own) {
      await rm(run.runDir.path, { recursive: true, force: true }).catch(() => {});
    }
  }
}
