// The agent (SIGTERM path 2/3): owns the one agent state and runs the supervision loop as a
// race between what Envoy does (exits, becomes ready) and what lastcall is told (terminate,
// drain, reload). Doing things to Envoy lives in envoy/; deciding when lives here.
import { mkdtemp, readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import YAML from "yaml";
import { delay, EventQueue, pollUntil } from "./async.ts";
import { RestartBudget, restartDelay } from "./backoff.ts";
import { type InflightReport, InflightTracker } from "./drain/in-flight.ts";
import type { ModeContext } from "./drain/modes/context.ts";
import { drainEnvoy, type DrainPlan, stopEnvoys } from "./drain/shutdown.ts";
import { AdminClient, readAdminAddress } from "./envoy/admin.ts";
import { activeRequests, parseStatsJson } from "./envoy/stats.ts";
import { envoyArgs } from "./envoy/args.ts";
import { AGENT_CLUSTER, type Bootstrap, deriveBootstrap, TCP_INSTANCE_SUFFIX } from "./envoy/bootstrap.ts";
import { describeExit, type EnvoyExit, type EnvoyProcess, spawnEnvoy } from "./envoy/process.ts";
import { validateConfig } from "./envoy/validate.ts";
import { filterWasmPath } from "./filter-asset.ts";
import type { EventLog } from "./log.ts";
import type { RunOptions } from "./options.ts";
import { ownPid } from "./runtime/process.ts";
import { createStatusApp, type ReadinessAnswer } from "./server/app.ts";
import { listen, type StatusServer } from "./server/listen.ts";
import { createMetrics } from "./server/metrics.ts";
import { type AgentState, type EpochInfo, initialState } from "./state.ts";
import { watchFiles } from "./watch.ts";

/** Exit codes of `lastcall run`. */
export const EXIT = { ok: 0, envoyGaveUp: 1, badConfig: 2 } as const;

/** A refusal at start: printed as one line, exit 2. */
export class StartError extends Error {
  override name = "StartError";
  constructor(message: string, readonly details: string[] = []) {
    super(message);
  }
}

/** Timeout of the filter's report calls: longer than the longest heartbeat hold. */
export function reportTimeoutMs(heartbeatMs: number): number {
  return heartbeatMs + 1000;
}

type AgentEvent =
  | { type: "exited"; instance: string; exit: EnvoyExit }
  | { type: "restart_due" }
  | { type: "reload"; reason: string }
  | { type: "drain" }
  | { type: "terminate"; source: string };

interface LiveEnvoy {
  info: EpochInfo;
  process: EnvoyProcess;
  startedAt: number;
  admin?: AdminClient;
  ready: Promise<boolean>;
  /** Ids its filters report under: the HTTP variant and, with TCP listeners, `<instance>/tcp`. */
  reporters: string[];
}

/** Where one generation (a cold start and its hot restarts) keeps its files. */
interface Generation {
  number: number;
  baseIdPath: string;
  baseId?: number;
}

/**
 * Supervises one Envoy for its whole life.
 *
 * @example
 * ```ts
 * const agent = new Agent(options, createEventLog("json"));
 * onSignal("SIGTERM", () => agent.terminate("SIGTERM"));
 * process.exitCode = await agent.run();
 * ```
 */
export class Agent {
  readonly #options: RunOptions;
  readonly #log: EventLog;
  readonly #state: AgentState = initialState();
  readonly #events = new EventQueue<AgentEvent>();
  readonly #tracker: InflightTracker;
  readonly #budget: RestartBudget;
  readonly #live = new Map<string, LiveEnvoy>();
  readonly #retiring = new Set<string>();
  readonly #stopNow = new AbortController();
  #envoyBinary = "";
  #runDir = "";
  #filterWasm?: string;
  #server?: StatusServer;
  #generation: Generation = { number: 0, baseIdPath: "" };
  #bootstrap?: Bootstrap;
  #configText = "";
  #terminateSources: string[] = [];
  #draining?: Promise<string>;
  #drainPlan?: DrainPlan;
  #unwatch?: () => void;
  #failure?: string;
  /** Resolves when a drain starts: releases the heartbeats the status server is holding. */
  #drainStarted!: () => void;
  readonly #drainStartedPromise = new Promise<void>((resolve) => (this.#drainStarted = resolve));

  constructor(options: RunOptions, log: EventLog, envoyBinary: string) {
    this.#options = options;
    this.#log = log;
    this.#envoyBinary = envoyBinary;
    this.#tracker = new InflightTracker({ zeroConfirmMs: options.zeroConfirmMs, heartbeatMs: options.heartbeatMs });
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

  /** `POST /drain`: steps 1–5 of the termination sequence, without exiting. */
  drain(): void {
    this.#events.push({ type: "drain" });
  }

  /** Runs until terminated or Envoy gives up; returns the process exit code. */
  async run(): Promise<number> {
    try {
      await this.#prepare();
    } catch (error) {
      await this.#close();
      throw error;
    }
    let restartAttempt = 0;
    try {
      await this.#startEnvoy("start");
      for (;;) {
        const event = await this.#events.next();
        switch (event.type) {
          case "exited": {
            const outcome = this.#onExit(event.instance, event.exit);
            if (outcome === "gave_up") return EXIT.envoyGaveUp;
            if (typeof outcome === "number") restartAttempt = outcome;
            break;
          }
          case "restart_due": {
            if (this.#state.phase !== "restarting") break;
            const outcome = await this.#restartAfterCrash(restartAttempt);
            if (outcome === "gave_up") return EXIT.envoyGaveUp;
            if (typeof outcome === "number") restartAttempt = outcome;
            break;
          }
          case "reload":
            await this.#reload(event.reason);
            break;
          case "drain":
            this.#startDrain("POST /drain");
            break;
          case "terminate":
            return await this.#terminate(event.source);
        }
      }
    } finally {
      await this.#close();
    }
  }

  // ---- start-up ----------------------------------------------------------------------------

  async #prepare(): Promise<void> {
    const o = this.#options;
    this.#runDir = o.runDir ?? await mkdtemp(join(tmpdir(), "lastcall-"));
    if (o.filter) this.#filterWasm = await filterWasmPath(o.filterWasm, this.#runDir);
    const app = createStatusApp({
      readiness: () => this.#readiness(),
      state: () => this.snapshot(),
      metrics: () => metrics.metrics(),
      report: (report) => this.#onReport(report),
      quit: () => this.terminate("POST /quitquitquit"),
      drain: () => this.drain(),
    });
    const metrics = createMetrics({
      state: () => this.#state,
      inflight: () => this.#tracker.inflight(this.#reporters()),
      ready: () => this.#state.phase === "running" && this.#state.drainStartedAt === undefined,
      reports: () => ({ accepted: this.#reportsAccepted(), stale: this.#tracker.staleReports }),
    });
    // A port already taken is a refusal at start (one line, exit 2), not a crash with a stack.
    this.#server = await listen(app, o.statusAddress, o.statusPort).catch((error: Error) => {
      throw new StartError(error.message);
    });
    if (o.watch.length > 0) {
      this.#unwatch = await watchFiles(o.watch, (paths) => this.reload(`changed: ${paths.join(", ")}`));
    }
  }

  /**
   * Takes a filter report and answers whether the agent is draining. A heartbeat outside a
   * drain is answered only after a hold shorter than the heartbeat period (a long poll), or at
   * once when a drain starts: the filter then learns of the drain in one round trip instead of
   * up to one heartbeat later, and at no cost per request.
   */
  async #onReport(report: InflightReport): Promise<boolean> {
    this.#tracker.report(report);
    if (this.#state.drainStartedAt === undefined && report.reason === "heartbeat") {
      const holdMs = Math.min(this.#options.heartbeatMs * 0.9, reportTimeoutMs(this.#options.heartbeatMs) - 500);
      await Promise.race([this.#drainStartedPromise, delay(holdMs)]);
    }
    return this.#state.drainStartedAt !== undefined;
  }

  /** Every id the filters of live Envoys report under. */
  #reporters(): string[] {
    return [...this.#live.values()].flatMap((l) => l.reporters);
  }

  #reportsAccepted(): number {
    let total = 0;
    for (const id of this.#reporters()) total += this.#tracker.view(id)?.reports ?? 0;
    return total;
  }

  /** Reads the user's config and derives, writes and validates the bootstrap of `epoch`. */
  async #prepareBootstrap(epoch: number, instance: string): Promise<{ path: string; bootstrap: Bootstrap; text: string }> {
    const o = this.#options;
    let text: string;
    let parsed: unknown;
    try {
      text = await readFile(o.config, "utf8");
      parsed = YAML.parse(text);
    } catch (error) {
      throw new StartError(`Cannot read Envoy config ${o.config}: ${(error as Error).message.split("\n")[0]}`);
    }
    let bootstrap: Bootstrap;
    try {
      bootstrap = deriveBootstrap(parsed, {
        adminPort: o.adminPort,
        statusAddress: o.statusAddress === "0.0.0.0" ? "127.0.0.1" : o.statusAddress,
        statusPort: this.#server!.port,
        filter: this.#filterWasm
          ? {
            wasmPath: this.#filterWasm,
            pluginConfig: {
              agent_cluster: AGENT_CLUSTER,
              heartbeat_ms: o.heartbeatMs,
              push_timeout_ms: reportTimeoutMs(o.heartbeatMs),
              epoch,
              instance,
              exclude_paths: o.excludePath,
            },
          }
          : undefined,
      });
    } catch (error) {
      throw new StartError(`Cannot use Envoy config ${o.config}: ${(error as Error).message}`);
    }
    const path = join(this.#runDir, `envoy-g${this.#generation.number}-epoch${epoch}.yaml`);
    await writeFile(path, YAML.stringify(bootstrap.config));
    const validation = await validateConfig(this.#envoyBinary, path);
    if (!validation.ok) throw new StartError(`Envoy rejected config ${o.config}`, validation.errors);
    return { path, bootstrap, text };
  }

  /** Starts Envoy: epoch 0 of a new generation, or (hot) the next epoch of the current one. */
  async #startEnvoy(why: "start" | "restart" | "reload", hot = false): Promise<void> {
    const o = this.#options;
    const previous = this.#state.current;
    if (!hot) {
      const number = this.#generation.number + 1;
      this.#generation = { number, baseIdPath: join(this.#runDir, `base-id-g${number}`) };
    }
    const epoch = hot && previous ? previous.epoch + 1 : 0;
    const instance = `${ownPid()}-${this.#generation.number}-${epoch}`;
    const prepared = await this.#prepareBootstrap(epoch, instance);
    if (prepared.text !== this.#configText) {
      if (this.#configText) this.#budget.refill();
      this.#configText = prepared.text;
    }
    this.#bootstrap = prepared.bootstrap;
    if (epoch > 0 && this.#generation.baseId === undefined) {
      this.#generation.baseId = Number((await readFile(this.#generation.baseIdPath, "utf8")).trim());
    }
    const adminAddressPath = join(this.#runDir, `admin-g${this.#generation.number}-epoch${epoch}`);
    const args = envoyArgs({
      configPath: prepared.path,
      concurrency: o.concurrency,
      epoch,
      baseIdPath: this.#generation.baseIdPath,
      baseId: this.#generation.baseId,
      hotRestart: o.hotRestart,
      adminAddressPath,
      drainTimeMs: o.drainTimeMs,
      parentShutdownMs: o.parentShutdownMs,
      extraArgs: o.envoyArgs,
    });
    const process = await spawnEnvoy(this.#envoyBinary, args);
    const info: EpochInfo = { epoch, pid: process.pid, instance };
    const filtered = this.#filterWasm !== undefined;
    const reporters = [
      ...(filtered && prepared.bootstrap.filteredListeners.length > 0 ? [instance] : []),
      ...(filtered && prepared.bootstrap.tcpListeners.length > 0 ? [`${instance}${TCP_INSTANCE_SUFFIX}`] : []),
    ];
    const live: LiveEnvoy = { info, process, startedAt: Date.now(), ready: Promise.resolve(false), reporters };
    this.#live.set(instance, live);
    this.#state.current = info;
    this.#state.epochs = [...this.#live.values()].map((l) => l.info);
    if (this.#state.phase !== "draining") this.#state.phase = "starting";
    process.exited.then((exit) => this.#events.push({ type: "exited", instance, exit }));
    this.#log(why === "reload" ? "epoch" : why, {
      epoch,
      pid: process.pid,
      generation: this.#generation.number,
      status_port: this.#server!.port,
      filter: this.#filterWasm ? prepared.bootstrap.filteredListeners : [],
      filter_tcp: this.#filterWasm ? prepared.bootstrap.tcpListeners : [],
      inbound: prepared.bootstrap.inboundListeners,
    });
    live.ready = this.#awaitReady(live, adminAddressPath);
  }

  /** Waits until the Envoy answers LIVE (or exits); logs `ready` with the time it took. */
  async #awaitReady(live: LiveEnvoy, adminAddressPath: string): Promise<boolean> {
    const gone = new AbortController();
    live.process.exited.then(() => gone.abort(new Error("Envoy exited")));
    try {
      const url = await pollUntil(() => readAdminAddress(adminAddressPath), 25, gone.signal);
      live.admin = new AdminClient(url);
      live.info.adminUrl = url;
      await pollUntil(async () => (await live.admin!.readiness()).live ? true : undefined, 50, gone.signal);
    } catch {
      return false;
    }
    this.#log("ready", { epoch: live.info.epoch, pid: live.info.pid, ms: Date.now() - live.startedAt, admin: live.info.adminUrl });
    if (this.#state.current === live.info && this.#state.phase === "starting") this.#state.phase = "running";
    return true;
  }

  // ---- Envoy exits ---------------------------------------------------------------------------

  /** Handles an Envoy exit: a parent finishing, a stop we asked for, or a crash. */
  #onExit(instance: string, exit: EnvoyExit): "gave_up" | number | undefined {
    const live = this.#live.get(instance);
    this.#live.delete(instance);
    for (const id of live?.reporters ?? [instance]) this.#tracker.retire(id);
    this.#state.epochs = [...this.#live.values()].map((l) => l.info);
    const fields = { epoch: live?.info.epoch, pid: live?.info.pid, exit: describeExit(exit) };
    if (this.#retiring.delete(instance) || this.#state.current?.instance !== instance) {
      this.#log("epoch_exit", fields);
      return undefined;
    }
    this.#state.lastExitReason = `Envoy exited with ${describeExit(exit)}`;
    this.#log("exit", fields);
    const parent = [...this.#live.values()].at(-1);
    if (parent) {
      // The child of a hot restart died; its parent still serves the last good config.
      this.#state.current = parent.info;
      this.#state.reloadsRejected++;
      this.#log("reload_rejected", { epoch: live?.info.epoch, reason: "new epoch exited", serving_epoch: parent.info.epoch });
      return undefined;
    }
    this.#state.current = undefined;
    return this.#crashed(describeExit(exit), Date.now() - (live?.startedAt ?? 0));
  }

  /** Spends the budget on a failed run and schedules the next start, or gives up. */
  #crashed(lastExit: string, ranMs: number): "gave_up" | number {
    const attempt = this.#budget.spend(ranMs);
    if (attempt === undefined) {
      this.#state.phase = "stopped";
      this.#failure = `Envoy kept exiting (last: ${lastExit}); restart budget of ${this.#budget.limit} spent`;
      this.#log("gave_up", { restarts: this.#budget.spent, last_exit: lastExit, message: this.#failure });
      return "gave_up";
    }
    const delayMs = restartDelay(attempt);
    this.#state.phase = "restarting";
    this.#log("restart_scheduled", { attempt, delay_ms: delayMs, last_exit: lastExit });
    delay(delayMs).then(() => this.#events.push({ type: "restart_due" }));
    return attempt;
  }

  /** Starts Envoy again after a crash; a start that fails counts as one more crash. */
  async #restartAfterCrash(attempt: number): Promise<"gave_up" | number | undefined> {
    this.#state.restarts++;
    try {
      await this.#startEnvoy("restart");
      return undefined;
    } catch (error) {
      this.#log("restart_failed", { attempt, error: (error as Error).message, details: (error as StartError).details ?? [] });
      return this.#crashed((error as Error).message, 0);
    }
  }

  // ---- reload ------------------------------------------------------------------------------

  async #reload(reason: string): Promise<void> {
    const current = this.#state.current;
    if (!current || this.#state.drainStartedAt !== undefined) {
      this.#log("reload_skipped", { reason, why: current ? "draining" : "Envoy not running" });
      return;
    }
    this.#log("reload", { reason });
    // Envoy refuses a hot restart while the previous epoch is still initializing.
    await this.#live.get(current.instance)?.ready;
    try {
      if (this.#options.hotRestart) {
        await this.#startEnvoy("reload", true);
        this.#state.hotRestarts++;
        return;
      }
      await this.#prepareBootstrap(current.epoch, current.instance); // validate before stopping
      const old = this.#live.get(current.instance);
      this.#retiring.add(current.instance);
      await old?.process.stop();
      await this.#startEnvoy("reload");
    } catch (error) {
      this.#state.reloadsRejected++;
      this.#log("reload_rejected", {
        reason,
        error: (error as Error).message,
        details: (error as StartError).details ?? [],
        serving_epoch: current.epoch,
      });
    }
  }

  // ---- drain and terminate -----------------------------------------------------------------

  #modeContext(): ModeContext {
    const o = this.#options;
    return {
      admin: () => this.#live.get(this.#state.current?.instance ?? "")?.admin,
      tracker: this.#tracker,
      instances: () => this.#reporters(),
      statPrefixes: o.drainScope === "all" ? undefined : new Set(this.#bootstrap?.inboundStatPrefixes ?? []),
      log: this.#log,
      terminationDrainMs: o.terminationDrainMs,
      heartbeatMs: o.heartbeatMs,
    };
  }

  /** Steps 1–5; idempotent: a second call returns the same drain. */
  #startDrain(source: string): Promise<string> {
    if (this.#draining) return this.#draining;
    const o = this.#options;
    const startedAt = Date.now();
    this.#state.drainStartedAt = startedAt; // step 1: /healthz/ready answers 503 from now on
    this.#drainStarted();
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
    this.#log("drain_start", { source, mode: plan.mode, scope: plan.scope, deadline_ms: plan.deadline - startedAt, min_drain_ms: plan.minDrainMs });
    const current = this.#live.get(this.#state.current?.instance ?? "");
    const envoyGone = current ? current.process.exited : Promise.resolve();
    this.#draining = drainEnvoy(plan, { ...this.#modeContext(), stopNow: this.#stopNow.signal, envoyGone });
    return this.#draining;
  }

  async #terminate(source: string): Promise<number> {
    this.#log("terminate", { source });
    if (this.#live.size === 0) {
      this.#state.phase = "stopped";
      this.#log("terminated", { mode: this.#options.drainMode, reason: "envoy_not_running", drain_ms: 0, inflight_at_stop: 0 });
      return EXIT.ok;
    }
    const reason = await this.#startDrain(source);
    this.#state.phase = "stopping";
    const admin = this.#live.get(this.#state.current?.instance ?? "")?.admin;
    const inflightAtStop = await this.#inflightNow(admin);
    await stopEnvoys([...this.#live.values()].map((l) => l.process), admin, this.#log, Math.min(3000, this.#options.stopMarginMs + 1000));
    const summary = {
      mode: this.#options.drainMode,
      reason,
      drainMs: Date.now() - (this.#drainPlan?.startedAt ?? Date.now()),
      inflightAtStop,
    };
    this.#state.termination = summary;
    this.#state.phase = "stopped";
    this.#log("terminated", { mode: summary.mode, reason, drain_ms: summary.drainMs, inflight_at_stop: inflightAtStop });
    return EXIT.ok;
  }

  /**
   * Requests in flight right before the stop: the filter's gauge read now, else its last report,
   * else Envoy's own stat. The last report alone can be stale: outside a drain, and until the
   * filter has acknowledged one, only heartbeats carry the count (a `requests`-mode drain can end
   * on Envoy's stat before the next heartbeat), and moves between non-zero counts are never pushed.
   */
  async #inflightNow(admin: AdminClient | undefined): Promise<number> {
    const ids = this.#reporters();
    const heard = ids.length > 0 && ids.every((id) => this.#tracker.status(id) !== "never");
    if (!admin) return heard ? this.#tracker.inflight(ids) : 0;
    try {
      if (!heard) return activeRequests(parseStatsJson(await admin.stats("downstream_rq_active$")), this.#modeContext().statPrefixes);
      // One Envoy only (its gauge sums the HTTP and TCP variants): a hot-restart child's stats
      // may include what it imported from its parent.
      if (this.#live.size === 1) {
        const gauge = parseStatsJson(await admin.stats("^wasmcustom\\.lastcall_inflight$")).find((s) => s.name === "wasmcustom.lastcall_inflight");
        if (gauge) return gauge.value;
      }
    } catch {
      // Envoy busy or gone: fall back to what was reported.
    }
    return heard ? this.#tracker.inflight(ids) : 0;
  }

  // ---- status ------------------------------------------------------------------------------

  async #readiness(): Promise<ReadinessAnswer> {
    if (this.#state.drainStartedAt !== undefined) return { ready: false, reason: "draining" };
    const current = this.#state.current;
    if (!current) {
      return { ready: false, reason: this.#state.lastExitReason ? `Envoy restarting: ${this.#state.lastExitReason}` : "Envoy not started" };
    }
    const admin = this.#live.get(current.instance)?.admin;
    if (!admin) return { ready: false, reason: `Envoy epoch ${current.epoch} starting: admin address not yet known` };
    const readiness = await admin.readiness();
    return readiness.live ? { ready: true, reason: "LIVE" } : { ready: false, reason: readiness.reason ?? readiness.state };
  }

  /** A copy of the state with the in-flight view, for `/v1/state`. */
  snapshot(): AgentState & { inflight: number; filter: string } {
    const reporters = this.#live.get(this.#state.current?.instance ?? "")?.reporters ?? [];
    return {
      ...structuredClone(this.#state),
      inflight: this.#tracker.inflight(this.#reporters()),
      filter: !this.#filterWasm ? "disabled" : reporters.length === 0 ? "not inserted" : this.#tracker.status(reporters[0]),
    };
  }

  async #close(): Promise<void> {
    this.#unwatch?.();
    const remaining = [...this.#live.values()].map((l) => l.process);
    await Promise.all(remaining.map((p) => p.stop(2000)));
    await this.#server?.close();
  }
}
