// The status server: probes, state, metrics, and the filter's reports. Routes read the agent
// through a small interface, so tests can call `app.request(url)` without a server.
import { Hono } from "hono";
import { type InflightReport, parseReport } from "../drain/in-flight.ts";
import type { ReportAnswer } from "../reports.ts";
import type { AgentState } from "../state.ts";

/** Readiness with the reason operators need when it is not ready. */
export interface ReadinessAnswer {
  ready: boolean;
  reason: string;
}

/** What the routes need from the agent. */
export interface StatusControls {
  readiness(): Promise<ReadinessAnswer>;
  state(): AgentState & { inflight: number; filter: string };
  metrics(): Promise<string>;
  /** Secret the filter sends in `x-lastcall-token`. */
  reportToken: string;
  /** Takes a filter report; answers whether the agent is draining, maybe with a probe. */
  report(report: InflightReport): Promise<ReportAnswer>;
  /** `POST /quitquitquit`: the termination sequence, as on SIGTERM. */
  quit(): void;
  /** `POST /drain`: drain without exiting. */
  drain(): void;
}

/**
 * Builds the status server's routes.
 *
 * @example
 * ```ts
 * const app = createStatusApp(controls);
 * const res = await app.request("/healthz/ready");
 * ```
 */
export function createStatusApp(controls: StatusControls): Hono {
  const app = new Hono();
  app.get("/healthz/ready", async function ready(c) {
    const answer = await controls.readiness();
    return c.json(answer, answer.ready ? 200 : 503);
  });
  app.get("/healthz/live", (c) => c.json({ live: true }));
  app.get("/v1/state", (c) => c.json(controls.state()));
  app.get("/metrics", async function metrics(c) {
    return c.body(await controls.metrics(), 200, { "content-type": "text/plain; version=0.0.4; charset=utf-8" });
  });
  app.post("/v1/inflight", async function inflight(c) {
    let report: InflightReport;
    try {
      report = parseReport(await c.req.json());
    } catch (error) {
      return c.json({ error: (error as Error).message }, 400);
    }
    if (c.req.header("x-lastcall-token") !== controls.reportToken) return c.json({ error: "report token missing or wrong" }, 403);
    const answer = await controls.report(report);
    c.header("x-lastcall-draining", answer.draining ? "1" : "0");
    if (answer.probe !== undefined) c.header("x-lastcall-probe", String(answer.probe));
    return c.json(answer);
  });
  app.post("/quitquitquit", (c) => {
    controls.quit();
    return c.json({ quitting: true });
  });
  app.post("/drain", (c) => {
    controls.drain();
    return c.json({ draining: true });
  });
  return app;
}
