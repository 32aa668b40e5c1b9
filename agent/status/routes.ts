// The status server's routes: probes, state, metrics, the filter's reports, control. They read
// the agent through a small interface, so tests call `app.request(url)` without a server.
import { Hono } from "hono";
import type { DrainRequest } from "../drain/plan.ts";
import type { DrainView } from "../drain/waiting.ts";
import type { AgentState } from "../state.ts";
import type { AppReport } from "../supervise/app-watch.ts";
import type { AppStopAnswer } from "../drain/app-stop.ts";
import { bodyCap, cappedBody, cappedJson } from "./body-cap.ts";
import { loopbackOnly } from "./loopback-only.ts";
import {
  type ConnectionMaker,
  type ConnectionPorts,
  notThroughEnvoy,
} from "./not-through-envoy.ts";
import { REPORT_TOKEN_HEADER } from "./report-token.ts";
import { REPORT_PATH, reportCall, type ReportControls } from "./report-route.ts";
import type { ReportAnswer } from "./reports.ts";

export type { ReportAnswer };

export { REPORT_MAX_BYTES } from "./report-route.ts";

/** The largest body of any other request (`POST /v1/app` sends about 80 bytes). */
export const REQUEST_MAX_BYTES = 4096;

/** Readiness with the reason operators need when it is not ready. */
export interface ReadinessAnswer {
  ready: boolean;
  reason: string;
}

/** What the routes need from the agent. */
export interface StatusControls extends ReportControls {
  readiness(): Promise<ReadinessAnswer>;
  state(): AgentState & { inflight: number; filter: string; drain?: DrainView };
  metrics(): Promise<string>;
  /** `POST /v1/app` (loopback only): `lastcall exec` says the app runs, or has exited; false: refused (too many apps). */
  app?(report: AppReport): boolean;
  /** `POST /quitquitquit` from loopback: the termination sequence, as on SIGTERM. */
  quit(): void;
  /**
   * `POST /drain` from loopback: drain without exiting. `?sidecar=native` (what `lastcall drain`
   * sends): the caller is a native sidecar's preStop, so the sidecar's SIGTERM will mean that
   * every app container has exited; `&asked_at=` (ms since the epoch): when it started, so the
   * floor runs from the pod's deletion rather than from the hook's arrival.
   */
  drain(request?: DrainRequest): void;
  /**
   * `GET /v1/app-stop` from anyone (the kubelet runs an httpGet preStop from the node): waits,
   * never starts or ends a drain; see agent/drain/app-stop.ts.
   */
  appStop?(): Promise<AppStopAnswer>;
  /**
   * Who made the connection a control request (`/quitquitquit`, `/drain`, `/v1/app`) came on:
   * one made by an Envoy lastcall supervises is refused (see `connectionMaker`).
   */
  connectionMaker(ports: ConnectionPorts): Promise<ConnectionMaker>;
}

/**
 * Builds the status server's routes.
 *
 * @param controls What the routes read and call on the agent
 * @returns The app, to serve with `listen` or to call with `app.request()`
 * @throws {RangeError} when `controls.reportToken` is too short (naming its length only)
 * @example
 * ```ts
 * const app = createStatusApp(controls);
 * const res = await app.request("/healthz/ready");
 * ```
 */
export function createStatusApp(controls: StatusControls): Hono {
  const app = new Hono();
  const report = reportCall(controls);
  const control = () =>
    [loopbackOnly(), notThroughEnvoy((ports) => controls.connectionMaker(ports))] as const;
  const capped = bodyCap({ maxBytes: REQUEST_MAX_BYTES });
  let served = false;
  app.use("*", (c, next) => (c.req.path === REPORT_PATH ? next() : capped(c, next)));
  app.get("/healthz/ready", async function ready(c) {
    const wait = readyWaitMs(c.req.query("wait_ms"));
    if (typeof wait === "string") return c.json({ error: wait }, 400);
    // Only lastcall's first start is waited for: once ready, a restarting Envoy is said at once.
    const answer = await readyWithin(controls, served ? 0 : wait);
    served ||= answer.ready;
    return c.json(answer, answer.ready ? 200 : 503);
  });
  app.get("/healthz/live", (c) => c.json({ live: true }));
  app.get("/v1/state", (c) => c.json(controls.state()));
  // An app container's preStop: the answer comes once lastcall's inbound side is quiet.
  app.get("/v1/app-stop", async function appStop(c) {
    if (!controls.appStop) return c.json({ error: "not served here" }, 404);
    return c.json(await controls.appStop());
  });
  app.get("/metrics", async function metrics(c) {
    return c.body(await controls.metrics(), 200, {
      "content-type": "text/plain; version=0.0.4; charset=utf-8",
    });
  });
  app.post(REPORT_PATH, async function inflight(c) {
    const token = c.req.header(REPORT_TOKEN_HEADER);
    const { status, headers, body } = await report(token, (max) => cappedBody(c, max));
    return c.json(body, status, headers);
  });
  app.post("/quitquitquit", ...control(), function quit(c) {
    controls.quit();
    return c.json({ quitting: true });
  });
  app.post("/v1/app", ...control(), function appState(c) {
    const body = cappedJson(c) as {
      state?: unknown;
      id?: unknown;
      pid?: unknown;
      status?: unknown;
    } | undefined;
    if (body?.state !== "running" && body?.state !== "exited") {
      return c.json({
        error: `app state must be "running" or "exited", not ${
          JSON.stringify(body?.state)?.slice(0, 40)
        }`,
      }, 400);
    }
    if (body.id !== undefined && (typeof body.id !== "string" || !/^[\w.-]{1,64}$/.test(body.id))) {
      return c.json({
        error: `app id must be 1 to 64 letters, digits, _ . or -, not ${
          JSON.stringify(body.id)?.slice(0, 40)
        }`,
      }, 400);
    }
    const taken = controls.app?.({
      state: body.state,
      id: body.id,
      pid: typeof body.pid === "number" ? body.pid : undefined,
      status: typeof body.status === "number" ? body.status : undefined,
    });
    return taken === false
      ? c.json({ error: "too many apps reported" }, 429)
      : c.json({ ok: true });
  });
  app.post("/drain", ...control(), function drain(c) {
    const askedAt = askedAtMs(c.req.query("asked_at"));
    if (typeof askedAt === "string") return c.json({ error: askedAt }, 400);
    controls.drain({
      nativeSidecar: c.req.query("sidecar") === "native",
      ...(askedAt !== undefined ? { askedAt } : {}),
    });
    return c.json({ draining: true });
  });
  return app;
}

/** The most `/healthz/ready?wait_ms=N` waits (inject's probes ask 2900, under their 3 s timeout). */
export const READY_WAIT_MAX_MS = 5000;

/** `asked_at` of `POST /drain`: ms since the epoch, undefined when absent, or why it is refused. */
function askedAtMs(text: string | undefined): number | undefined | string {
  if (text === undefined) return undefined;
  return /^\d{1,15}$/.test(text)
    ? Number(text)
    : `asked_at "${text}" is not a time in whole milliseconds since the epoch`;
}

/** `wait_ms` of `/healthz/ready`: 0 when absent, or why it is refused. */
function readyWaitMs(text: string | undefined): number | string {
  if (text === undefined) return 0;
  const ms = /^\d{1,5}$/.test(text) ? Number(text) : Number.NaN;
  return ms <= READY_WAIT_MAX_MS
    ? ms
    : `wait_ms "${text}" is not a whole number of milliseconds from 0 to ${READY_WAIT_MAX_MS}`;
}

/**
 * Readiness, waiting up to `waitMs` for a starting Envoy to become ready (asked every 10 ms), so
 * the kubelet's first probe passes the moment it can instead of a probe period later. A drain
 * answers at once, and so does every probe once lastcall was ready (the route's caller).
 */
async function readyWithin(controls: StatusControls, waitMs: number): Promise<ReadinessAnswer> {
  const until = Date.now() + waitMs;
  let answer = await controls.readiness();
  while (!answer.ready && answer.reason !== "draining" && Date.now() + 10 <= until) {
    await new Promise((done) => setTimeout(done, 10));
    answer = await controls.readiness();
  }
  return answer;
}
