// What the agent starts before its first Envoy, wired together once: the run folder, the Envoys,
// the drain's parts, and the status server that reads them.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { AppStopGate } from "./drain/app-stop.ts";
import { DrainMetrics } from "./drain/drain-metrics.ts";
import { Drainer } from "./drain/drainer.ts";
import { LiveEpochs } from "./drain/epochs.ts";
import { HolderBook } from "./drain/holders.ts";
import type { InflightTracker } from "./drain/in-flight.ts";
import { OldEpochs } from "./drain/old-epochs.ts";
import { type DrainRequest, pushesFrom, untilPushes } from "./drain/plan.ts";
import { DrainWatch } from "./drain/waiting.ts";
import { identifyEnvoy } from "./envoy/identify.ts";
import type { EventLog } from "./lib/log.ts";
import { watchFiles } from "./lib/watch.ts";
import type { RunOptions } from "./options.ts";
import type { AgentState } from "./state.ts";
import type { BoundServer, StatusServer } from "./status/listen.ts";
import { createReportToken } from "./status/report-token.ts";
import { ReportDesk } from "./status/reports.ts";
import { serveStatus } from "./status/serve.ts";
import type { AppWatch } from "./supervise/app-watch.ts";
import { Envoys } from "./supervise/envoys.ts";
import { filterWasmPath } from "./supervise/filter-asset.ts";
import { prepareRunDir } from "./supervise/run-dir.ts";
import { prepareBootstrap } from "./supervise/bootstrap-file.ts";

/** What the agent runs once prepared. */
export interface Running {
  /** The run folder, and whether lastcall made it (then it is removed at the end). */
  runDir: { path: string; own: boolean };
  /** Secret the filter sends with its reports: anything else on the status port is refused. */
  reportToken: string;
  filterWasm?: string;
  /** `envoy --version` (identify.ts), run once when first asked: only a failing start needs it. */
  identify(): Promise<unknown>;
  /** Answers the filters' reports. */
  desk: ReportDesk;
  envoys: Envoys;
  epochs: LiveEpochs;
  drainer: Drainer;
  old: OldEpochs;
  /** How drains ended, for `/metrics`. */
  drainMetrics: DrainMetrics;
  /** Answers the apps' preStop hooks. */
  appStop: AppStopGate;
  server: StatusServer;
  /** Derives and validates a bootstrap from the config as it is now (a reload's first step). */
  validate(signal: AbortSignal): Promise<void>;
  unwatch?: () => void;
}

/** What the agent owns that the run reads. */
export interface AgentParts {
  options: RunOptions;
  log: EventLog;
  /** The Envoy binary (`--envoy`, `$ENVOY_BIN`, or `envoy` on PATH). */
  envoyBinary: string;
  /** The agent's state, read by the status server. */
  state: AgentState;
  tracker: InflightTracker;
  app: AppWatch;
  /** Aborts when lastcall closes. */
  closing: AbortSignal;
  /** The status port, bound (held) before the agent's modules loaded: commands/run.ts. */
  status: BoundServer;
}

/** What the status server and the watched files ask of the agent. */
export interface AgentControls {
  terminate(source: string, byApps?: boolean): void;
  reload(reason: string): void;
  drainInPlace(request?: DrainRequest): void;
}

/**
 * Prepares a run: a fresh run folder, the filter, the drain's parts, the status server, the
 * watched files. What failed half-way is undone (a run folder lastcall made is removed).
 *
 * @throws {StartError} when the status port is taken, or the filter cannot be written
 * @example
 * ```ts
 * const run = await prepareRun({ options, log, envoyBinary, state, tracker, app, closing }, agent);
 * ```
 */
export async function prepareRun(a: AgentParts, controls: AgentControls): Promise<Running> {
  const { options: o, log, envoyBinary, tracker, app, closing } = a;
  // Asked only when a start needs explaining (Envoys.start): an Envoy that goes LIVE does not
  // wait for a second Envoy process, nor share the CPU with it.
  let identified: Promise<unknown> | undefined;
  const identify = () => identified ??= identifyEnvoy(envoyBinary);
  // A given folder is made fresh (an earlier lastcall's files removed, 0700): see run-dir.ts.
  if (o.runDir !== undefined) await prepareRunDir(o.runDir);
  const runDir = {
    path: o.runDir ?? await mkdtemp(join(tmpdir(), "lastcall-")),
    own: o.runDir === undefined,
  };
  try {
    const envoys = new Envoys(o, envoyBinary, runDir.path);
    const filterWasm = o.filter ? await filterWasmPath(o.filterWasm, runDir.path) : undefined;
    const epochs = new LiveEpochs({ options: o, log, envoys, tracker, closing });
    /** What the filters' VMs said holds a drain. */
    const holders = new HolderBook();
    const drainer = new Drainer({
      options: o,
      log,
      epochs,
      app,
      watch: new DrainWatch({ envoys, tracker, holders, app, log }),
    });
    const drainMetrics = new DrainMetrics();
    const old = new OldEpochs({
      options: o,
      log,
      epochs,
      drainMetrics,
      tellFilters: () => desk.tellFilters(),
    });
    const desk = new ReportDesk(tracker, {
      heartbeatMs: o.heartbeatMs,
      draining: (instance) => drainer.plan !== undefined || old.isDraining(instance),
      quiet: (instance) =>
        drainer.plan !== undefined && !old.isDraining(instance) &&
        Date.now() < pushesFrom(drainer.plan, o.heartbeatMs),
      holders,
    });
    const appStop = new AppStopGate({
      plan: () => drainer.plan,
      inboundInflight: (signal) => epochs.inboundInflight(signal),
      closeInbound: (why) => epochs.closeInbound(why),
      proxyEndsWithApps: () => drainer.podEnding && !epochs.carriesCallsOut() && !app.watched(),
      endProxy: () => controls.terminate("app-stop", true),
      log,
      closing,
    });
    // As a drain begins (whichever began it), the filters and the app's hooks learn of it.
    void drainer.began.then((plan) => {
      desk.tellFilters();
      appStop.drainBegan();
      // Before its floor ends no zero can end the drain: the filters push from then on.
      untilPushes(plan, o.heartbeatMs, closing).then(() => desk.tellFilters(), () => {});
    });
    const reportToken = createReportToken();
    const server = serveStatus(a.status, {
      view: () => ({
        state: a.state,
        envoys,
        tracker,
        filtered: filterWasm !== undefined,
        drain: () => drainer.view(),
      }),
      desk,
      app,
      reportToken,
      quit: () => controls.terminate("POST /quitquitquit"),
      drain: (options) => controls.drainInPlace(options),
      appStop: () => appStop.answer(),
      drainMetrics,
    });
    const run: Running = {
      runDir,
      reportToken,
      filterWasm,
      identify,
      desk,
      envoys,
      epochs,
      drainer,
      old,
      drainMetrics,
      appStop,
      server,
      validate: (signal) =>
        prepareBootstrap(envoyBinary, o, {
          runDir: runDir.path,
          name: "validate",
          epoch: 0,
          instance: "validate",
          statusPort: server.port,
          filterWasm,
          reportToken,
          signal,
        }).then(() => {}),
    };
    try {
      if (o.watch.length > 0) {
        run.unwatch = await watchFiles(
          o.watch,
          (paths) => controls.reload(`changed: ${paths.join(", ")}`),
        );
      }
    } catch (error) {
      await server.close();
      throw error;
    }
    return run;
  } catch (error) {
    if (runDir.own) await rm(runDir.path, { recursive: true, force: true }).catch(() => {});
    throw error;
  }
}
