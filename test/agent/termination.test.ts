// The termination sequence against the real thing, in each drain mode: lastcall supervising a
// real Envoy with the in-flight filter, real HTTP clients, real signals. Tests wait on lastcall's
// events and `/v1/state`, never on sleeps. Signals and hooks: termination-signals.test.ts.
import { Agent as HttpAgent, request } from "node:http";
import type { Socket } from "node:net";
import { describe, expect, it } from "vitest";
import { closeWebSocket, http1, openWebSocket, type Outcome } from "../filter/clients.ts";
import { waitFor } from "../support/envoy.ts";
import { inboundConfig, isAlive, type LastcallEvent, startLastcall } from "../support/lastcall.ts";
import { agentSees, upstreamForFile } from "../support/serving.ts";
import { ended, names, servingFor } from "./termination-support.ts";

const app = upstreamForFile();
const serving = servingFor(app);

const time = (e: LastcallEvent) => Date.parse(e.ts);

describe("termination in inflight mode", () => {
  it("lets long requests started before SIGTERM all finish, and exits only after the last one", async () => {
    const { lc, port, status } = await serving(["--min-drain", "0s", "--grace", "30s"]);
    const clients = Array.from({ length: 4 }, () => http1(port, "/hold"));
    await app.until((a) => a.held === 4);
    await agentSees(status, 4);

    lc.signal("SIGTERM");
    await lc.event("listeners_draining");
    const outcomes: Outcome[] = [];
    for (let left = 3; left >= 1; left--) {
      app.release(1);
      await agentSees(status, left);
      // The agent knows a request is gone and others are still held: it keeps waiting.
      expect(ended(lc)).toBe(false);
      expect(isAlive(lc.pid)).toBe(true);
    }
    const beforeLast = lc.events.length;
    const lastReleaseAt = Date.now();
    app.release(1);
    outcomes.push(...await Promise.all(clients));

    const terminated = await lc.event("terminated");
    expect(await lc.exited).toEqual({ code: 0, signal: null });
    expect(outcomes.every((o) => o.status === 200 && !o.reset)).toBe(true);
    // Nothing ended the drain before the last release.
    expect(lc.events.slice(0, beforeLast).map((e) => e.event)).not.toContain("drain_wait_done");
    expect(time(await lc.event("drain_wait_done"))).toBeGreaterThanOrEqual(lastReleaseAt); // same clock
    expect(terminated).toMatchObject({
      mode: "inflight",
      reason: "inflight_zero",
      inflight_at_stop: 0,
    });
    expect(names(lc)).toEqual(
      expect.arrayContaining([
        "terminate",
        "drain_start",
        "listeners_draining",
        "drain_wait_done",
        "envoy_quit_requested",
        "terminated",
      ]),
    );
    const order = [
      "terminate",
      "drain_start",
      "listeners_draining",
      "drain_wait_done",
      "envoy_quit_requested",
      "terminated",
    ].map((n) => names(lc).indexOf(n));
    expect(order).toEqual([...order].sort((a, b) => a - b));
  });

  it("is not held by an idle keep-alive connection, while connections mode is", async () => {
    const inflight = await serving(["--min-drain", "0s", "--grace", "10s"]);
    const connections = await serving([
      "--min-drain",
      "0s",
      "--grace",
      "10s",
      "--drain-mode",
      "connections",
    ]);
    const idle = async (port: number) => {
      const agent = new HttpAgent({ keepAlive: true, maxSockets: 1 });
      const socket = await new Promise<Socket>((done, fail) => {
        const req = request({ host: "127.0.0.1", port, path: "/", agent }, (res) => {
          res.resume();
          res.on("end", () => done(req.socket!));
        });
        req.on("error", fail);
        req.end();
      });
      let closedAt = 0;
      socket.once("close", () => (closedAt = Date.now()));
      return { agent, socket, closedAt: () => closedAt };
    };
    const a = await idle(inflight.port);
    const b = await idle(connections.port);
    await agentSees(inflight.status, 0);

    inflight.lc.signal("SIGTERM");
    connections.lc.signal("SIGTERM");
    const done = await inflight.lc.event("drain_wait_done");
    expect(done.reason).toBe("inflight_zero");
    // The idle connection was still open when the inflight mode decided it was done.
    expect(a.closedAt() === 0 || a.closedAt() >= time(done)).toBe(true);
    const terminated = await inflight.lc.event("terminated");
    expect(terminated).toMatchObject({ mode: "inflight", reason: "inflight_zero" });
    expect(await inflight.lc.exited).toEqual({ code: 0, signal: null });

    // The connections mode still waits for b after the inflight mode's Envoy is gone.
    await connections.lc.event("listeners_draining");
    expect(b.closedAt()).toBe(0);
    expect(ended(connections.lc)).toBe(false);
    expect(isAlive(connections.lc.pid)).toBe(true);

    const closedAt = Date.now();
    b.socket.destroy();
    const cxDone = await connections.lc.event("drain_wait_done");
    expect(cxDone.reason).toBe("connections_zero");
    expect(time(cxDone)).toBeGreaterThanOrEqual(closedAt);
    expect(await connections.lc.event("terminated")).toMatchObject({
      mode: "connections",
      reason: "connections_zero",
    });
    a.agent.destroy();
    b.agent.destroy();
  });

  it("counts a streaming response and a WebSocket until each ends", async () => {
    const { lc, port, status } = await serving(["--min-drain", "0s", "--grace", "30s"]);
    const socket = await openWebSocket(port);
    let streamEndedAt = 0;
    let chunks = 0;
    const stream = new Promise<number | undefined>((done, fail) => {
      const req = request({
        host: "127.0.0.1",
        port,
        path: "/stream?chunks=15&interval=100",
        agent: false,
      }, (res) => {
        res.on("data", () => chunks++);
        res.on("end", () => {
          streamEndedAt = Date.now();
          done(res.statusCode);
        });
      });
      req.on("error", fail);
      req.end();
    });
    await waitFor(() => (chunks > 0 ? true : undefined), { what: "the first chunk" });
    await agentSees(status, 2);

    lc.signal("SIGTERM");
    await lc.event("listeners_draining");
    expect(await stream).toBe(200);
    await agentSees(status, 1);
    expect(ended(lc)).toBe(false);
    // The tunnel still carries messages during the drain.
    const echoed = new Promise<string>((done) =>
      socket.once("message", (data: Buffer) => done(String(data)))
    );
    socket.send("still here");
    expect(await echoed).toBe("still here");
    expect(ended(lc)).toBe(false);

    const closedAt = Date.now();
    await closeWebSocket(socket);
    const done = await lc.event("drain_wait_done");
    expect(done.reason).toBe("inflight_zero");
    expect(time(done)).toBeGreaterThan(streamEndedAt);
    expect(time(done)).toBeGreaterThanOrEqual(closedAt);
    expect(await lc.event("terminated")).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
    });
  });

  it("cuts requests still running at the deadline and reports them", async () => {
    const { lc, port, status } = await serving([
      "--grace",
      "4s",
      "--stop-margin",
      "1s",
      "--min-drain",
      "0s",
    ]);
    let cutAt = 0;
    const client = http1(port, "/hold").then((o) => ((cutAt = Date.now()), o));
    await app.until((a) => a.held === 1);
    await agentSees(status, 1);

    lc.signal("SIGTERM");
    const terminated = await lc.event("terminated", undefined, 15_000);
    expect(terminated).toMatchObject({ mode: "inflight", reason: "deadline", inflight_at_stop: 1 });
    const outcome = await client;
    expect(outcome.reset).toBe(true);
    expect(cutAt).toBeGreaterThanOrEqual(time(await lc.event("drain_start")));
    expect(names(lc)).not.toContain("drain_wait_done");
    expect(await lc.exited).toEqual({ code: 0, signal: null });
  });
});

describe("termination in the other modes", () => {
  it("requests mode waits for Envoy's active requests to reach zero", async () => {
    const { lc, port } = await serving(["--min-drain", "0s", "--drain-mode", "requests"]);
    const client = http1(port, "/hold");
    await app.until((a) => a.held === 1);

    lc.signal("SIGTERM");
    await lc.event("listeners_draining");
    expect(ended(lc)).toBe(false);
    const releasedAt = Date.now();
    app.release();
    expect(await client).toEqual({ status: 200, reset: false });
    const done = await lc.event("drain_wait_done");
    expect(done.reason).toBe("requests_zero");
    expect(time(done)).toBeGreaterThanOrEqual(releasedAt);
    expect(await lc.event("terminated")).toMatchObject({
      mode: "requests",
      reason: "requests_zero",
      inflight_at_stop: 0,
    });
  });

  it("sleep mode sleeps the termination drain whatever is in flight", async () => {
    const { lc, port } = await serving([
      "--min-drain",
      "0s",
      "--drain-mode",
      "sleep",
      "--termination-drain",
      "1s",
    ]);
    const held = http1(port, "/hold");
    await app.until((a) => a.held === 1);
    lc.signal("SIGTERM");
    const done = await lc.event("drain_wait_done");
    expect(done).toMatchObject({ mode: "sleep", reason: "sleep_done" });
    // It slept the whole termination drain, from the signal, though a request was held throughout.
    expect(done.ms).toBeGreaterThanOrEqual(1000);
    expect(app.held).toBe(1);
    expect(await lc.event("terminated")).toMatchObject({
      mode: "sleep",
      reason: "sleep_done",
      inflight_at_stop: 1,
    });
    expect(await lc.exited).toEqual({ code: 0, signal: null });
    expect(await held).toMatchObject({ reset: true });
  });

  it("--fail-healthcheck fails Envoy's health check filter before draining", async () => {
    const { lc, port } = await serving(["--min-drain", "0s", "--fail-healthcheck"], {
      healthCheck: true,
    });
    expect((await http1(port, "/healthz")).status).toBe(200);
    const held = http1(port, "/hold");
    await app.until((a) => a.held === 1);

    lc.signal("SIGTERM");
    await lc.event("listeners_draining");
    expect(names(lc).indexOf("healthcheck_failed")).toBeGreaterThan(
      names(lc).indexOf("drain_start"),
    );
    expect(names(lc).indexOf("healthcheck_failed")).toBeLessThan(
      names(lc).indexOf("listeners_draining"),
    );
    // Envoy still serves (a request is held), and its health check now fails.
    expect((await http1(port, "/healthz")).status).toBe(503);
    app.release();
    expect(await held).toEqual({ status: 200, reset: false });
    expect(await lc.event("terminated")).toMatchObject({ reason: "inflight_zero" });
  });
});

describe("Istio environment", () => {
  it("maps EXIT_ON_ZERO_ACTIVE_CONNECTIONS=true to the connections mode", async () => {
    const { lc, port } = await serving(["--min-drain", "0s"], {
      env: { EXIT_ON_ZERO_ACTIVE_CONNECTIONS: "true" },
    });
    expect(await lc.event("istio_environment")).toMatchObject({
      applied: [expect.stringContaining("--drain-mode connections")],
    });
    // One closed connection makes Envoy show the stat (usedonly hides a gauge never changed; a
    // missing stat ends Istio's wait at once, as `connections_stat_missing`).
    expect(await http1(port, "/")).toEqual({ status: 200, reset: false });
    lc.signal("SIGTERM");
    expect(await lc.event("terminated")).toMatchObject({
      mode: "connections",
      reason: "connections_zero",
    });
  });

  it("refuses timings that contradict the deadline, with the numbers", async () => {
    const lc = startLastcall(inboundConfig({ upstreamPort: app.port }), {
      args: ["--min-drain", "30s", "--grace", "30s"],
    });
    expect(await lc.exited).toEqual({ code: 2, signal: null });
    expect(lc.output()).toMatch(/--min-drain 30s must be shorter than --grace 30s/);
    expect(lc.events.map((e) => e.event)).not.toContain("start");
  });
});
