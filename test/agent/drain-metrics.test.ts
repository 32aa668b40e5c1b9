// How drains ended, as `/metrics` shows it with a real Envoy: a reload's old epoch, a `POST /drain`
// deadline, a termination.
import { describe, expect, it } from "vitest";
import { isAlive } from "../support/lastcall.ts";
import { agentState, holdOne, serving, upstreamForFile } from "../support/serving.ts";
import { parseSamples } from "../support/metrics-text.ts";

const app = upstreamForFile();

/** Every sample `/metrics` shows: `name{labels}` to value. */
async function samples(status: string): Promise<Map<string, number>> {
  return parseSamples(await (await fetch(`${status}/metrics`)).text());
}

describe("a reload's old epoch", () => {
  it("a hot restart whose parent drains to zero (defaults): one reload drain under inflight_zero, nothing cut", async () => {
    const { lc, port, status, envoyPid } = await serving(app.port, []);
    const { held } = await holdOne(app, port, status);
    lc.signal("SIGHUP");
    await lc.event("epoch_draining", (e) => (e.epochs as number[]).includes(0));
    const during = await samples(status);
    expect(during.get('lastcall_draining{kind="reload"}')).toBe(1);
    expect(during.get('lastcall_drain_seconds_left{kind="reload"}')).toBeGreaterThan(590); // --parent-shutdown 10m
    expect(during.get('lastcall_drain_seconds_left{kind="reload"}')).toBeLessThanOrEqual(600);
    expect(
      [...during.keys()].some((k) =>
        k.startsWith('lastcall_drain_duration_seconds_count{kind="reload"')
      ),
    ).toBe(false);
    app.release();
    expect(await held).toEqual({ status: 200, reset: false });
    expect(await lc.event("epoch_drained")).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
    });

    const after = await samples(status);
    expect(after.get('lastcall_drain_duration_seconds_count{kind="reload",reason="inflight_zero"}'))
      .toBe(1);
    expect(after.get('lastcall_requests_cut_total{kind="reload"}')).toBe(0);
    expect(after.get('lastcall_response_bytes_cut_total{kind="reload"}')).toBe(0);
    expect(after.get('lastcall_draining{kind="reload"}')).toBe(0);
    // lastcall does not stop a hot-restart parent (its child ends it): no time to a stop.
    expect(after.get('lastcall_drain_last_response_to_stop_seconds_count{kind="reload"}')).toBe(0);
    expect(isAlive(envoyPid)).toBe(true);
  });

  it("a cold reload (--no-hot-restart): lastcall stops the drained Envoy, and times the last zero to that stop", async () => {
    const { lc, port, status, envoyPid } = await serving(app.port, ["--no-hot-restart"]);
    const { held } = await holdOne(app, port, status);
    lc.signal("SIGHUP");
    await lc.event("epoch_draining");
    app.release();
    expect(await held).toEqual({ status: 200, reset: false });
    expect(await lc.event("epoch_drained")).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
    });
    await lc.event("ready", (e) => e.pid !== envoyPid);
    const after = await samples(status);
    expect(after.get('lastcall_drain_duration_seconds_count{kind="reload",reason="inflight_zero"}'))
      .toBe(1);
    expect(after.get('lastcall_requests_cut_total{kind="reload"}')).toBe(0);
    expect(after.get('lastcall_drain_last_response_to_stop_seconds_count{kind="reload"}')).toBe(1);
    expect(after.get('lastcall_drain_last_response_to_stop_seconds_sum{kind="reload"}'))
      .toBeLessThan(1);
  });
});

describe("POST /drain", () => {
  it("a request held past the deadline: counted under `deadline`, and nothing cut: Envoy runs on and the request is answered", async () => {
    // The deadline itself is under test: --grace 3s --stop-margin 1s puts it 2 s after /drain.
    const { lc, port, status, envoyPid } = await serving(app.port, [
      "--min-drain",
      "0s",
      "--grace",
      "3s",
      "--stop-margin",
      "1s",
    ]);
    const { held } = await holdOne(app, port, status);
    expect((await fetch(`${status}/drain`, { method: "POST" })).status).toBe(200);
    await lc.event("drain_start", (e) => e.source === "POST /drain");
    expect((await samples(status)).get('lastcall_draining{kind="drain"}')).toBe(1);
    expect(await lc.event("drain_wait_done")).toMatchObject({ reason: "deadline" });

    const after = await samples(status);
    expect(after.get('lastcall_drain_duration_seconds_count{kind="drain",reason="deadline"}')).toBe(
      1,
    );
    expect(
      after.get('lastcall_drain_duration_seconds_bucket{le="1",kind="drain",reason="deadline"}'),
    ).toBe(0);
    expect(
      after.get('lastcall_drain_duration_seconds_bucket{le="5",kind="drain",reason="deadline"}'),
    ).toBe(1);
    expect(after.get('lastcall_requests_cut_total{kind="drain"}')).toBe(0);
    expect(after.get('lastcall_draining{kind="drain"}')).toBe(0);
    expect(after.get('lastcall_phase{phase="draining"}')).toBe(1);
    // What is true of /drain: its Envoy is not stopped, the request is still in flight, and answered.
    expect(isAlive(envoyPid)).toBe(true);
    expect((await agentState(status)).inflight).toBe(1);
    app.release();
    expect(await held).toEqual({ status: 200, reset: false });
  });
});

describe("a termination", () => {
  it("held by a request (defaults): scraped while it drains, draining 1 and seconds left falling; the last zero to the stop in `terminated`", async () => {
    const { lc, port, status } = await serving(app.port, []);
    const { held } = await holdOne(app, port, status);
    lc.signal("SIGTERM");
    await lc.event("listeners_draining");
    const first = await samples(status);
    expect(first.get('lastcall_draining{kind="termination"}')).toBe(1);
    const left1 = first.get('lastcall_drain_seconds_left{kind="termination"}')!;
    expect(left1).toBeGreaterThan(0);
    expect(left1).toBeLessThanOrEqual(28); // --grace 30s less --stop-margin 2s
    await lc.event("drain_waiting"); // 2 s after the signal
    const second = await samples(status);
    expect(second.get('lastcall_draining{kind="termination"}')).toBe(1);
    const left2 = second.get('lastcall_drain_seconds_left{kind="termination"}')!;
    expect(left2).toBeLessThan(left1);
    expect(left2).toBeGreaterThan(0);
    app.release();
    expect(await held).toEqual({ status: 200, reset: false });
    const terminated = await lc.event("terminated");
    expect(terminated).toMatchObject({ reason: "inflight_zero", inflight_at_stop: 0 });
    expect(terminated.last_zero_to_stop_ms).toBeGreaterThanOrEqual(0);
    expect(terminated.last_zero_to_stop_ms).toBeLessThan(1000);
    expect(await lc.exited).toEqual({ code: 0, signal: null });
  });
});
