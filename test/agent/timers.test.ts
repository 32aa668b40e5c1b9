// Timers that agree with each other, on lastcall's defaults where the case allows: the floor
// never ends before the listeners drain, draining listeners accept until the floor ends, the
// deadline runs from the signal, and an Envoy killed under the drain is reported truthfully.
import { describe, expect, it } from "vitest";
import { http1 } from "../filter/clients.ts";
import { isAlive, type LastcallEvent } from "../support/lastcall.ts";
import {
  agentSees,
  agentState,
  reportToken,
  serving,
  upstreamForFile,
} from "../support/serving.ts";

const app = upstreamForFile();
const time = (e: LastcallEvent) => Date.parse(e.ts);

describe("timers that agree", () => {
  it("--drain-delay at the default --min-drain: the floor is raised past it, listeners drain, late requests are served", async () => {
    const { lc, port } = await serving(app.port, ["--drain-delay", "5s"]);
    expect(await lc.event("timings_resolved")).toMatchObject({
      resolved: [expect.stringContaining("--min-drain 10s")],
    });
    lc.signal("SIGTERM");
    await lc.event("drain_delay");
    // During the delay Envoy still takes new requests as usual; so does it right after it.
    expect((await http1(port, "/")).status).toBe(200);
    const draining = await lc.event("listeners_draining", undefined, 15_000);
    const late = await http1(port, "/delay?ms=1000"); // arrives after the delay, inside the floor
    expect(late).toEqual({ status: 200, reset: false });
    const terminated = await lc.event("terminated", undefined, 20_000);
    expect(terminated).toMatchObject({ reason: "inflight_zero", inflight_at_stop: 0 });
    expect(time(terminated)).toBeGreaterThan(time(draining));
    expect(Number(terminated.drain_ms)).toBeGreaterThanOrEqual(10_000);
  });

  it("--min-drain longer than the default --drain-time: Envoy's listeners still accept new connections late in the floor", async () => {
    const { lc, port, status } = await serving(app.port, ["--min-drain", "8s"]);
    expect(await lc.event("timings_resolved")).toMatchObject({
      resolved: [expect.stringContaining("--drain-time 8s")],
    });
    const first = http1(port, "/delay?ms=6000");
    await agentSees(status, 1);
    lc.signal("SIGTERM");
    expect(await first).toEqual({ status: 200, reset: false });
    // 6 s after the signal: past Envoy's default 5 s drain time, inside the 8 s floor.
    expect(await http1(port, "/")).toEqual({ status: 200, reset: false });
    expect(await lc.event("terminated", undefined, 20_000)).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
    });
  });

  it("POST /drain, then SIGTERM after the drain's own deadline: the grace period runs from the signal", async () => {
    const { lc, port, status } = await serving(app.port, ["--grace", "8s"]); // deadline: 6 s after the signal
    const long = http1(port, "/delay?ms=9000");
    await agentSees(status, 1);
    await fetch(`${status}/drain`, { method: "POST" });
    // The drain's wait ends at its own deadline (6 s) with the request still in flight.
    expect(await lc.event("drain_wait_done", undefined, 15_000)).toMatchObject({
      reason: "deadline",
    });
    lc.signal("SIGTERM");
    expect(await lc.event("drain_deadline")).toMatchObject({
      source: "SIGTERM",
      deadline_ms: 6000,
    });
    expect(await long).toEqual({ status: 200, reset: false });
    expect(await lc.event("terminated", undefined, 15_000)).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
    });
  });

  it("Envoy killed (SIGKILL) under the drain with a request in flight: the count lost is said, exit non-zero", async () => {
    const { lc, port, status, envoyPid } = await serving(app.port, []);
    const held = http1(port, "/hold");
    await app.until((a) => a.held === 1);
    await agentSees(status, 1);
    lc.signal("SIGTERM");
    await lc.event("listeners_draining");
    process.kill(envoyPid, "SIGKILL");
    expect(await lc.event("epoch_exit")).toMatchObject({
      pid: envoyPid,
      exit: "signal SIGKILL",
      unexpected: true,
      inflight_at_exit: 1,
    });
    const terminated = await lc.event("terminated");
    expect(terminated).toMatchObject({
      reason: "envoy_exited",
      inflight_at_stop: 1,
      envoy_exits: ["signal SIGKILL"],
      delivery_unchecked: ["Envoy exited before its buffers were read"],
    });
    expect(terminated).not.toHaveProperty("bytes_unsent_at_stop");
    expect((await lc.exited).code).toBe(1);
    expect((await held).reset).toBe(true);
    expect(isAlive(envoyPid)).toBe(false);
  });

  it("a filter's first heartbeat after the drain began is answered at once with the drain, not held (--heartbeat 5s)", async () => {
    const { lc, port, status, envoyPid } = await serving(app.port, ["--heartbeat", "5s"]);
    const held = http1(port, "/hold");
    await app.until((a) => a.held === 1);
    await agentSees(status, 1);
    lc.signal("SIGTERM");
    await lc.event("listeners_draining");
    // What a worker that has not heard of the drain sends next: its periodic heartbeat, saying
    // draining false (a hint only: the agent ends a drain on a pulled zero). Held, it would come back
    // after 4.5 s (90 % of the period) and the filter would learn of the drain that late.
    const instance = (await agentState(status)).current!.instance;
    const answer = fetch(`${status}/v1/inflight`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-lastcall-token": reportToken(envoyPid) },
      body: JSON.stringify({
        instance,
        epoch: 0,
        inflight: 1,
        draining: false,
        reason: "heartbeat",
      }),
    });
    const first = await Promise.race([
      answer,
      new Promise<"held">((done) => setTimeout(() => done("held"), 2000)),
    ]);
    expect(first).not.toBe("held");
    expect((first as Response).headers.get("x-lastcall-draining")).toBe("1");
    app.release();
    expect(await held).toEqual({ status: 200, reset: false });
    expect(await lc.event("terminated")).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
    });
  });
});
