// The termination sequence's signals and hooks against a real Envoy with the in-flight filter: a
// second SIGTERM or SIGINT while draining, POST /drain then SIGTERM, and a filter that never
// reports. Tests wait on lastcall's events and `/v1/state`, never on sleeps.
import { describe, expect, it } from "vitest";
import { http1 } from "../filter/clients.ts";
import { waitFor } from "../support/envoy.ts";
import { isAlive } from "../support/lastcall.ts";
import { agentSees, upstreamForFile } from "../support/serving.ts";
import { ended, names, servingFor } from "./termination-support.ts";

const app = upstreamForFile();
const serving = servingFor(app);

describe("signals and hooks", () => {
  it("ignores a second SIGTERM while draining", async () => {
    const { lc, port, status } = await serving(["--min-drain", "0s"]);
    const held = http1(port, "/hold");
    await app.until((a) => a.held === 1);
    await agentSees(status, 1);

    lc.signal("SIGTERM");
    await lc.event("listeners_draining");
    lc.signal("SIGTERM");
    expect(await lc.event("terminate_ignored")).toMatchObject({ source: "SIGTERM" });
    expect(ended(lc)).toBe(false);
    expect(names(lc).filter((n) => n === "drain_start")).toHaveLength(1);

    app.release();
    expect(await held).toEqual({ status: 200, reset: false });
    expect(await lc.event("terminated")).toMatchObject({ reason: "inflight_zero" });
  });

  it("stops at once on a second SIGINT, cutting what is still in flight", async () => {
    const { lc, port, status } = await serving(["--min-drain", "0s"]);
    const held = http1(port, "/hold");
    await app.until((a) => a.held === 1);
    await agentSees(status, 1);

    lc.signal("SIGINT");
    await lc.event("listeners_draining");
    lc.signal("SIGINT");
    await lc.event("stop_now");
    expect(await lc.event("terminated")).toMatchObject({
      reason: "stopped_now",
      inflight_at_stop: 1,
    });
    expect((await held).reset).toBe(true);
    expect(app.held).toBe(0);
    expect(await lc.exited).toEqual({ code: 0, signal: null });
  });

  it("POST /drain drains without exiting; SIGTERM later finishes", async () => {
    const { lc, status, envoyPid } = await serving(["--min-drain", "0s"]);
    expect((await fetch(`${status}/healthz/ready`)).status).toBe(200);

    expect((await fetch(`${status}/drain`, { method: "POST" })).status).toBe(200);
    expect(await lc.event("drain_start")).toMatchObject({ source: "POST /drain" });
    const ready = await fetch(`${status}/healthz/ready`);
    expect(ready.status).toBe(503);
    expect(await ready.json()).toMatchObject({ ready: false, reason: "draining" });
    expect(await lc.event("drain_wait_done")).toMatchObject({ reason: "inflight_zero" });
    // Drained, but Envoy and lastcall keep running until told to stop.
    const info = await (await fetch(`${lc.adminUrl()}/server_info`)).json() as { state: string };
    expect(info.state).toBe("LIVE"); // its admin still answers: the process was not stopped
    expect(isAlive(envoyPid)).toBe(true);
    expect(names(lc)).not.toContain("envoy_quit_requested");
    expect(names(lc)).not.toContain("terminated");

    lc.signal("SIGTERM");
    expect(await lc.event("terminated")).toMatchObject({
      mode: "inflight",
      reason: "inflight_zero",
    });
    expect(names(lc).filter((n) => n === "drain_start")).toHaveLength(1);
    expect(await lc.exited).toEqual({ code: 0, signal: null });
    await waitFor(() => (isAlive(envoyPid) ? undefined : true), {
      what: `Envoy ${envoyPid} to be gone`,
    });
  });

  it("POST /drain, then SIGTERM while a request is held (the defaults): one wait goes on, its lines said once", async () => {
    const { lc, port, status } = await serving([]);
    const held = http1(port, "/hold");
    await app.until((a) => a.held === 1);
    await agentSees(status, 1);
    expect((await fetch(`${status}/drain`, { method: "POST" })).status).toBe(200);
    await lc.event("listeners_draining");
    lc.signal("SIGTERM");
    await lc.event("drain_deadline");
    app.release();
    expect(await held).toEqual({ status: 200, reset: false });
    expect(await lc.event("terminated")).toMatchObject({ reason: "inflight_zero" });
    expect(names(lc).filter((n) => n === "drain_wait_done")).toHaveLength(1);
    expect(await lc.exited).toEqual({ code: 0, signal: null });
  });

  it("falls back to Envoy's request count when the filter never reports", async () => {
    const { lc, port } = await serving(["--min-drain", "0s", "--no-filter"], { filter: false });
    const held = http1(port, "/hold");
    await app.until((a) => a.held === 1);

    lc.signal("SIGTERM");
    expect(await lc.event("drain_fallback")).toMatchObject({ from: "inflight", to: "requests" });
    expect(ended(lc)).toBe(false);
    app.release();
    expect(await held).toEqual({ status: 200, reset: false });
    expect(await lc.event("terminated")).toMatchObject({
      mode: "inflight",
      reason: "requests_zero_fallback",
      inflight_at_stop: 0,
    });
  });
});
