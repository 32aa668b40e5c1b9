// What the status server says of the agent: readiness, `/v1/state`, and the counts behind
// `/metrics`, computed from the agent's state and its live Envoys at the moment of asking; and
// the server itself, wired to the agent.
import type { AppWatch } from "../supervise/app-watch.ts";
import type { InflightTracker } from "../drain/in-flight.ts";
import type { DrainRequest } from "../drain/plan.ts";
import type { DrainView } from "../drain/waiting.ts";
import type { Envoys, Epoch } from "../supervise/envoys.ts";
import type { ReportDesk } from "./reports.ts";
import { createStatusApp, type ReadinessAnswer, type StatusControls } from "./routes.ts";
import { reportCall, reportFront } from "./report-route.ts";
import type { BoundServer, StatusServer } from "./listen.ts";
import { createMetrics } from "./metrics.ts";
import type { DrainMetrics } from "../drain/drain-metrics.ts";
import { connectionMaker } from "./not-through-envoy.ts";
import type { AgentState } from "../state.ts";
import type { AppStopAnswer } from "../drain/app-stop.ts";

/** What the answers are made from. */
export interface StatusView {
  state: AgentState;
  envoys: Envoys;
  tracker: InflightTracker;
  /** Whether the filter is in Envoy. */
  filtered: boolean;
  /** What the drain under way waits for; undefined outside a drain. */
  drain?(): DrainView | undefined;
}

/**
 * The Envoy that serves, when it is ready and answering, no drain began, and its listeners are
 * not draining (a cold reload's old Envoy: the next starts only after it).
 */
function servingReady(v: StatusView): Epoch | undefined {
  if (v.state.drainStartedAt !== undefined) return undefined;
  const serving = v.envoys.serving();
  return serving && !serving.hung && !serving.listenersDraining ? serving : undefined;
}

/** Readiness as `/healthz/ready` would answer it, without asking Envoy (for `lastcall_ready`). */
export function readyNow(v: StatusView): boolean {
  return servingReady(v) !== undefined;
}

/**
 * `/healthz/ready`: ready while the Envoy that serves (a hot-restart parent until its child is
 * LIVE) answers and no drain began. Envoy is asked only to say why a starting one is not ready.
 *
 * @example
 * ```ts
 * const { ready, reason } = await readiness(view);
 * ```
 */
export async function readiness(v: StatusView): Promise<ReadinessAnswer> {
  if (v.state.drainStartedAt !== undefined) return { ready: false, reason: "draining" };
  const serving = v.envoys.serving();
  if (serving?.hung) {
    return {
      ready: false,
      reason:
        `Envoy epoch ${serving.info.epoch} (pid ${serving.info.pid}) is not answering its admin`,
    };
  }
  if (serving?.listenersDraining) {
    return {
      ready: false,
      reason:
        `Envoy epoch ${serving.info.epoch} finishes its requests for a cold reload: the next starts after it`,
    };
  }
  if (serving) return { ready: true, reason: "LIVE" };
  const newest = v.envoys.newest();
  if (!newest) {
    return {
      ready: false,
      reason: v.state.lastExitReason
        ? `Envoy restarting: ${v.state.lastExitReason}`
        : "Envoy not started",
    };
  }
  if (!newest.admin) {
    return {
      ready: false,
      reason: `Envoy epoch ${newest.info.epoch} starting: admin address not yet known`,
    };
  }
  const answer = await newest.admin.readiness(1000);
  return { ready: false, reason: answer.reason ?? answer.state };
}

/**
 * What `/v1/state` answers: the state, the in-flight view, and `unresponsiveSince` while the
 * serving Envoy's admin has not answered for a while (hung, or stopped): when it last did.
 */
export type StateSnapshot = AgentState & {
  inflight: number;
  filter: string;
  drain?: DrainView;
  unresponsiveSince?: number;
};

/** A copy of the state with the in-flight view, for `/v1/state`. */
export function snapshot(v: StatusView): StateSnapshot {
  const reporters = v.envoys.serving()?.reporters ?? v.envoys.newest()?.reporters ?? [];
  const drain = v.drain?.();
  const silentSince = v.envoys.serving()?.silentSince;
  return {
    ...structuredClone(v.state),
    ...(silentSince !== undefined ? { unresponsiveSince: silentSince } : {}),
    inflight: v.tracker.inflight(v.envoys.reporters()),
    filter: !v.filtered
      ? "disabled"
      : reporters.length === 0
      ? "not inserted"
      : v.tracker.status(reporters[0]),
    ...(drain ? { drain } : {}),
  };
}

/** Filter reports accepted from the live Envoys. */
export function reportsAccepted(v: StatusView): number {
  let total = 0;
  for (const id of v.envoys.reporters()) total += v.tracker.view(id)?.reports ?? 0;
  return total;
}

/** What the status server is wired to, besides the view. */
export interface StatusWiring {
  /** The agent's state and Envoys, at the moment of asking. */
  view(): StatusView;
  /** Takes the filter's reports. */
  desk: ReportDesk;
  /** Takes `lastcall exec`'s news of the app. */
  app: AppWatch;
  /** The secret the filter sends with its reports. */
  reportToken: string;
  /** `POST /quitquitquit`. */
  quit(): void;
  /** `POST /drain` (`?sidecar=native`: the sidecar's SIGTERM will mean every app has exited). */
  drain(request?: DrainRequest): void;
  /** `GET /v1/app-stop`: an app container's preStop, answered once the inbound side is quiet. */
  appStop?(): Promise<AppStopAnswer>;
  /** How drains ended, for `/metrics`. */
  drainMetrics?: DrainMetrics;
}

/**
 * Serves the status routes and `/metrics` on the bound status port (held: the agent warms it once
 * its first Envoy is spawned; a request waits meanwhile).
 *
 * @example
 * ```ts
 * const server = serveStatus(await bindStatus("127.0.0.1", 15020, { held: true }), wiring);
 * ```
 */
export function serveStatus(server: BoundServer, w: StatusWiring): StatusServer {
  let refused = 0;
  const metrics = createMetrics({
    state: () => w.view().state,
    inflight: () => w.view().tracker.inflight(w.view().envoys.reporters()),
    ready: () => readyNow(w.view()),
    reports: () => ({
      accepted: reportsAccepted(w.view()),
      stale: w.view().tracker.staleReports,
      unknown: w.view().tracker.unknownReports,
      refused,
    }),
    xds: () => w.view().envoys.xdsStats.snapshot(),
    drains: w.drainMetrics,
  });
  const controls: StatusControls = {
    readiness: () => readiness(w.view()),
    state: () => snapshot(w.view()),
    metrics: () => metrics.metrics(),
    reportToken: w.reportToken,
    report: (report) => w.desk.answer(report),
    reportRefused: () => refused++,
    app: (report) => w.app.report(report),
    quit: w.quit,
    drain: w.drain,
    appStop: w.appStop,
    // Control requests an Envoy of this agent carries (a user's route to the status port) are refused.
    connectionMaker: (ports) =>
      connectionMaker(ports, w.view().envoys.all().map((live) => live.info.pid)),
  };
  server.serve(createStatusApp(controls), reportFront(reportCall(controls)));
  return server;
}
