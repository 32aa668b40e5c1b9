// The tracker decides when "zero in flight" is real. Time is faked: never slept.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { type InflightReport, InflightTracker, parseReport } from "../../agent/drain/in-flight.ts";

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

const report = (instance: string, seq: number, inflight: number, draining = true, reason = "zero", probe?: number): InflightReport => ({
  instance,
  epoch: 0,
  seq,
  inflight,
  draining,
  reason,
  ...(probe === undefined ? {} : { probe }),
});

/** A tracker that knows these live processes. */
function tracking(...instances: string[]): InflightTracker {
  const tracker = new InflightTracker();
  for (const id of instances) tracker.expect(id);
  return tracker;
}

/** Starts waiting for zero and exposes whether it settled. */
function watch(tracker: InflightTracker, instances: string[], signal = new AbortController().signal) {
  const state = { settled: false, error: undefined as unknown };
  tracker.waitForZero(instances, signal).then(() => (state.settled = true), (error) => {
    state.settled = true;
    state.error = error;
  });
  return state;
}

/** The filter's answer to a probe: a fresh read of (seq, count). */
function answerProbe(tracker: InflightTracker, instance: string, seq: number, inflight: number): number {
  const probe = tracker.probeFor(instance);
  expect(probe).toBeDefined();
  tracker.report(report(instance, seq, inflight, true, "probe", probe));
  return probe!;
}

describe("InflightTracker.waitForZero", () => {
  it("does not end on a pushed zero alone: it asks for a probe and ends on the probe's zero", async () => {
    const tracker = tracking("a");
    const wanted: string[] = [];
    tracker.onProbeWanted((id) => wanted.push(id));
    const wait = watch(tracker, ["a"]);
    tracker.report(report("a", 3, 0));
    await vi.advanceTimersByTimeAsync(10_000);
    expect(wait.settled).toBe(false);
    expect(wanted).toEqual(["a"]);
    answerProbe(tracker, "a", 3, 0);
    await vi.advanceTimersByTimeAsync(0);
    expect(wait).toEqual({ settled: true, error: undefined });
  });

  it("a lost busy push cannot end the drain: the probe reads the counter afresh", async () => {
    const tracker = tracking("a");
    const wait = watch(tracker, ["a"]);
    tracker.report(report("a", 3, 0));
    // A request started (seq 4, count 1); its busy push was lost. The probe sees it.
    answerProbe(tracker, "a", 4, 1);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(wait.settled).toBe(false);
    expect(tracker.inflight(["a"])).toBe(1);
    expect(tracker.probeFor("a")).toBeUndefined(); // no candidate: nothing to probe
    tracker.report(report("a", 5, 0));
    answerProbe(tracker, "a", 5, 0);
    await vi.advanceTimersByTimeAsync(0);
    expect(wait.settled).toBe(true);
  });

  it("counts only probes issued after the wait began (a zero confirmed before the floor is asked again)", async () => {
    const tracker = tracking("a");
    const first = watch(tracker, ["a"]);
    tracker.report(report("a", 3, 0));
    answerProbe(tracker, "a", 3, 0);
    await vi.advanceTimersByTimeAsync(0);
    expect(first.settled).toBe(true);
    const second = watch(tracker, ["a"]);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(second.settled).toBe(false);
    answerProbe(tracker, "a", 3, 0);
    await vi.advanceTimersByTimeAsync(0);
    expect(second.settled).toBe(true);
  });

  it("ignores a probe answer with an id issued before the wait", async () => {
    const tracker = tracking("a");
    const early = watch(tracker, ["a"]);
    tracker.report(report("a", 3, 0));
    const oldProbe = tracker.probeFor("a")!;
    early.settled = true; // abandoned; a new wait begins
    const wait = watch(tracker, ["a"]);
    tracker.report(report("a", 3, 0, true, "probe", oldProbe));
    await vi.advanceTimersByTimeAsync(1000);
    expect(wait.settled).toBe(false);
  });

  it("ignores an older zero that arrives after a newer busy report", async () => {
    const tracker = tracking("a");
    expect(tracker.report(report("a", 5, 1, true, "busy"))).toBe("accepted");
    const wait = watch(tracker, ["a"]);
    expect(tracker.report(report("a", 4, 0))).toBe("stale");
    expect(tracker.report(report("a", 4, 0, true, "probe", 99))).toBe("stale");
    expect(tracker.staleReports).toBe(2);
    expect(tracker.inflight(["a"])).toBe(1);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(wait.settled).toBe(false);
  });

  it("trusts a zero only from a report composed while draining", async () => {
    const tracker = tracking("a");
    tracker.report(report("a", 4, 0, false, "heartbeat"));
    const wait = watch(tracker, ["a"]);
    expect(tracker.probeFor("a")).toBeUndefined();
    tracker.report(report("a", 4, 0, false, "probe", 1_000_000)); // not draining: no confirmation
    await vi.advanceTimersByTimeAsync(10_000);
    expect(wait.settled).toBe(false);
    tracker.report(report("a", 4, 0, true, "heartbeat"));
    answerProbe(tracker, "a", 4, 0);
    await vi.advanceTimersByTimeAsync(0);
    expect(wait.settled).toBe(true);
  });

  it("waits for every instance: a hot-restart parent and child", async () => {
    const tracker = tracking("parent", "child");
    tracker.report(report("parent", 9, 0));
    tracker.report(report("child", 2, 2, true, "busy"));
    const wait = watch(tracker, ["parent", "child"]);
    answerProbe(tracker, "parent", 9, 0);
    expect(tracker.probeFor("child")).toBeUndefined();
    await vi.advanceTimersByTimeAsync(1000);
    expect(wait.settled).toBe(false);
    expect(tracker.inflight(["parent", "child"])).toBe(2);
    tracker.report(report("child", 3, 0));
    answerProbe(tracker, "child", 3, 0);
    await vi.advanceTimersByTimeAsync(0);
    expect(wait.settled).toBe(true);
  });

  it("keeps sequences per instance: a child's low sequence is not stale against its parent's", () => {
    const tracker = tracking("parent", "child");
    tracker.report(report("parent", 100, 3, false, "heartbeat"));
    expect(tracker.report(report("child", 1, 1, false, "heartbeat"))).toBe("accepted");
    expect(tracker.inflight(["parent", "child"])).toBe(4);
    expect(tracker.staleReports).toBe(0);
  });

  it("keeps no state for an instance it was not told about", () => {
    const tracker = tracking("a");
    expect(tracker.report(report("x".repeat(200), 9e15, 0))).toBe("unknown");
    expect(tracker.view("x".repeat(200))).toBeUndefined();
    expect(tracker.unknownReports).toBe(1);
    tracker.retire("a");
    expect(tracker.report(report("a", 1, 0))).toBe("unknown");
  });

  it("a busy instance that exits (retired) no longer holds the wait", async () => {
    const tracker = tracking("parent", "child");
    tracker.report(report("parent", 9, 1, true, "busy"));
    tracker.report(report("child", 3, 0));
    const wait = watch(tracker, ["parent", "child"]);
    answerProbe(tracker, "child", 3, 0);
    await vi.advanceTimersByTimeAsync(1000);
    expect(wait.settled).toBe(false);
    tracker.retire("parent");
    await vi.advanceTimersByTimeAsync(0);
    expect(wait.settled).toBe(true);
  });

  it("does not take a process that never reported for one at zero", async () => {
    const tracker = tracking("a");
    const wait = watch(tracker, ["a"]);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(wait.settled).toBe(false);
  });

  it("rejects with the signal's reason when aborted", async () => {
    const tracker = tracking("a");
    const controller = new AbortController();
    tracker.report(report("a", 1, 1, true, "busy"));
    const wait = watch(tracker, ["a"], controller.signal);
    controller.abort(new Error("deadline"));
    await vi.advanceTimersByTimeAsync(0);
    expect(wait.settled).toBe(true);
    expect((wait.error as Error).message).toBe("deadline");
  });

  it("rejects at once when the signal is already aborted", async () => {
    const tracker = tracking("a");
    const wait = watch(tracker, ["a"], AbortSignal.abort(new Error("too late")));
    await vi.advanceTimersByTimeAsync(0);
    expect((wait.error as Error).message).toBe("too late");
  });
});

describe("InflightTracker.status", () => {
  it("is never before a report, reporting after one, silent after three missed heartbeats", () => {
    const tracker = (() => { const t = new InflightTracker({ heartbeatMs: 1000 }); t.expect("a"); return t; })();
    expect(tracker.status("a")).toBe("never");
    tracker.report(report("a", 1, 0, false, "heartbeat"));
    expect(tracker.status("a")).toBe("reporting");
    vi.advanceTimersByTime(3000);
    expect(tracker.status("a")).toBe("reporting");
    vi.advanceTimersByTime(1);
    expect(tracker.status("a")).toBe("silent");
    // A repeat of the same counter state still proves the filter is alive.
    tracker.report(report("a", 1, 0, false, "heartbeat"));
    expect(tracker.status("a")).toBe("reporting");
    expect(tracker.view("a")?.reports).toBe(2);
  });

  it("a stale report does not make a silent filter look alive", () => {
    const tracker = (() => { const t = new InflightTracker({ heartbeatMs: 1000 }); t.expect("a"); return t; })();
    tracker.report(report("a", 5, 0, false, "heartbeat"));
    vi.advanceTimersByTime(5000);
    tracker.report(report("a", 4, 0, false, "heartbeat"));
    expect(tracker.status("a")).toBe("silent");
  });

  it("is never again once the instance is retired", () => {
    const tracker = tracking("a");
    tracker.report(report("a", 1, 0));
    tracker.retire("a");
    expect(tracker.status("a")).toBe("never");
  });
});

describe("parseReport", () => {
  it("reads a report", () => {
    const body = { instance: "42-1-0", epoch: 0, seq: 3, inflight: 1, draining: true, reason: "busy" };
    expect(parseReport(body)).toEqual(body);
  });

  it("defaults draining to false and reason to unknown", () => {
    expect(parseReport({ instance: "a", epoch: 0, seq: 0, inflight: 0 })).toMatchObject({ draining: false, reason: "unknown" });
  });

  it("reads a probe answer", () => {
    const body = { instance: "a", epoch: 1, seq: 3, inflight: 0, draining: true, reason: "probe", probe: 42 };
    expect(parseReport(body)).toEqual(body);
  });

  it.each([
    [{ instance: "a", epoch: 0, seq: 1e300, inflight: 0 }, "Report field seq is not a count: 1e+300"],
    [{ instance: "a", epoch: 0, seq: 1, inflight: 0, probe: "1" }, 'Report field probe is not a count: "1"'],
    [null, "Report must be a JSON object"],
    [{ epoch: 0, seq: 0, inflight: 0 }, "Report field instance is not a short string: undefined"],
    [{ instance: "a", epoch: 0, seq: -1, inflight: 0 }, "Report field seq is not a count: -1"],
    [{ instance: "a", epoch: 0, seq: 1, inflight: 1.5 }, "Report field inflight is not a count: 1.5"],
    [{ instance: "a", epoch: "0", seq: 1, inflight: 1 }, 'Report field epoch is not a count: "0"'],
  ])("refuses %j", (body, message) => {
    expect(() => parseReport(body)).toThrow(message);
  });
});
