import { afterEach, describe, expect, it, vi } from "vitest";
import { InflightTracker } from "../../agent/drain/in-flight.ts";
import { ReportDesk } from "../../agent/status/reports.ts";

const heartbeat = (draining: boolean, seq = 1) => ({ instance: "a", epoch: 0, seq, inflight: 0, draining, reason: "heartbeat" });

describe("ReportDesk", () => {
  afterEach(() => vi.useRealTimers());

  // With fake timers a held heartbeat never comes back: an answer that settles was not held.
  it("holds a heartbeat outside a drain (the long poll)", async () => {
    vi.useFakeTimers();
    const tracker = new InflightTracker();
    tracker.expect("a");
    const desk = new ReportDesk(tracker, { heartbeatMs: 5000, draining: () => false });
    let settled = false;
    const answer = desk.answer(heartbeat(false)).then((a) => (settled = true, a));
    await vi.advanceTimersByTimeAsync(4000);
    expect(settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1000);
    expect(await answer).toEqual({ draining: false, probe: undefined });
  });

  it("answers at once the first heartbeat of a filter that does not know of the drain yet", async () => {
    vi.useFakeTimers();
    const tracker = new InflightTracker();
    tracker.expect("a");
    const desk = new ReportDesk(tracker, { heartbeatMs: 5000, draining: () => true });
    expect(await desk.answer(heartbeat(false))).toEqual({ draining: true, probe: undefined });
  });

  it("holds the heartbeats of a filter that knows of the drain, until a probe is wanted", async () => {
    vi.useFakeTimers();
    const tracker = new InflightTracker();
    tracker.expect("a");
    const desk = new ReportDesk(tracker, { heartbeatMs: 5000, draining: () => true });
    let settled = false;
    const answer = desk.answer(heartbeat(true)).then((a) => (settled = true, a));
    await vi.advanceTimersByTimeAsync(100);
    expect(settled).toBe(false);
    const wait = tracker.waitForZero(["a"], new AbortController().signal); // a zero to confirm: probe wanted
    const { probe } = await answer;
    expect(probe).toBeGreaterThan(0);
    tracker.report({ ...heartbeat(true), reason: "probe", probe });
    await wait;
  });
});
