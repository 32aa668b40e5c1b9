// The tracker decides when "zero in flight" is real. Time is faked: never slept.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { type InflightReport, InflightTracker, parseReport } from "../../agent/drain/in-flight.ts";

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

const report = (instance: string, seq: number, inflight: number, draining = true, reason = "zero"): InflightReport => ({
  instance,
  epoch: 0,
  seq,
  inflight,
  draining,
  reason,
});

/** Starts waiting for zero and exposes whether it settled. */
function watch(tracker: InflightTracker, instances: string[], signal = new AbortController().signal) {
  const state = { settled: false, error: undefined as unknown };
  tracker.waitForZero(instances, signal).then(() => (state.settled = true), (error) => {
    state.settled = true;
    state.error = error;
  });
  return state;
}

describe("InflightTracker.waitForZero", () => {
  it("confirms a draining zero after zeroConfirmMs with no later report", async () => {
    const tracker = new InflightTracker({ zeroConfirmMs: 50 });
    tracker.report(report("a", 3, 0));
    const wait = watch(tracker, ["a"]);
    await vi.advanceTimersByTimeAsync(49);
    expect(wait.settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(wait).toEqual({ settled: true, error: undefined });
  });

  it("ignores an older zero that arrives after a newer busy report", async () => {
    const tracker = new InflightTracker({ zeroConfirmMs: 50 });
    expect(tracker.report(report("a", 5, 1, true, "busy"))).toBe(true);
    const wait = watch(tracker, ["a"]);
    expect(tracker.report(report("a", 4, 0))).toBe(false);
    expect(tracker.staleReports).toBe(1);
    expect(tracker.inflight(["a"])).toBe(1);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(wait.settled).toBe(false);
  });

  it("does not confirm a zero followed within zeroConfirmMs by a busy report", async () => {
    const tracker = new InflightTracker({ zeroConfirmMs: 50 });
    tracker.report(report("a", 1, 0));
    const wait = watch(tracker, ["a"]);
    await vi.advanceTimersByTimeAsync(30);
    tracker.report(report("a", 2, 1, true, "busy"));
    await vi.advanceTimersByTimeAsync(1000);
    expect(wait.settled).toBe(false);
    // The next zero gets a full confirmation period of its own.
    tracker.report(report("a", 3, 0));
    await vi.advanceTimersByTimeAsync(49);
    expect(wait.settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(wait.settled).toBe(true);
  });

  it("does not restart the confirmation when the same zero is repeated by another worker", async () => {
    const tracker = new InflightTracker({ zeroConfirmMs: 50 });
    tracker.report(report("a", 7, 0));
    const wait = watch(tracker, ["a"]);
    await vi.advanceTimersByTimeAsync(40);
    tracker.report(report("a", 7, 0, true, "heartbeat"));
    await vi.advanceTimersByTimeAsync(10);
    expect(wait.settled).toBe(true);
  });

  it("trusts a zero only from a report composed while draining", async () => {
    const tracker = new InflightTracker({ zeroConfirmMs: 50 });
    tracker.report(report("a", 4, 0, false, "heartbeat"));
    const wait = watch(tracker, ["a"]);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(wait.settled).toBe(false);
    // The same counter state, now acknowledged by a filter that knows of the drain.
    tracker.report(report("a", 4, 0, true, "heartbeat"));
    await vi.advanceTimersByTimeAsync(50);
    expect(wait.settled).toBe(true);
  });

  it("does not trust a newer zero from a filter that has not seen the drain, even after a draining report", async () => {
    const tracker = new InflightTracker({ zeroConfirmMs: 50 });
    tracker.report(report("a", 4, 1, true, "busy"));
    tracker.report(report("a", 5, 0, false, "heartbeat"));
    const wait = watch(tracker, ["a"]);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(wait.settled).toBe(false);
  });

  it("waits for every instance: a hot-restart parent and child", async () => {
    const tracker = new InflightTracker({ zeroConfirmMs: 50 });
    tracker.report(report("parent", 9, 0));
    tracker.report(report("child", 2, 2, true, "busy"));
    const wait = watch(tracker, ["parent", "child"]);
    await vi.advanceTimersByTimeAsync(1000);
    expect(wait.settled).toBe(false);
    expect(tracker.inflight(["parent", "child"])).toBe(2);
    tracker.report(report("child", 3, 0));
    await vi.advanceTimersByTimeAsync(50);
    expect(wait.settled).toBe(true);
  });

  it("keeps sequences per instance: a child's low sequence is not stale against its parent's", () => {
    const tracker = new InflightTracker();
    tracker.report(report("parent", 100, 3, false, "heartbeat"));
    expect(tracker.report(report("child", 1, 1, false, "heartbeat"))).toBe(true);
    expect(tracker.inflight(["parent", "child"])).toBe(4);
    expect(tracker.staleReports).toBe(0);
  });

  it("a busy instance that exits (retired) no longer holds the wait", async () => {
    const tracker = new InflightTracker({ zeroConfirmMs: 50 });
    tracker.report(report("parent", 9, 1, true, "busy"));
    tracker.report(report("child", 3, 0));
    const wait = watch(tracker, ["parent", "child"]);
    await vi.advanceTimersByTimeAsync(1000);
    expect(wait.settled).toBe(false);
    tracker.retire("parent");
    await vi.advanceTimersByTimeAsync(50);
    expect(wait.settled).toBe(true);
  });

  it("resolves when every instance waited on has exited", async () => {
    const tracker = new InflightTracker({ zeroConfirmMs: 50 });
    tracker.report(report("a", 1, 5, true, "busy"));
    const wait = watch(tracker, ["a"]);
    tracker.retire("a");
    await vi.advanceTimersByTimeAsync(0);
    expect(wait.settled).toBe(true);
  });

  // "Never reported" is not "exited": only a retired process counts as done.
  it("does not take a process that never reported for one at zero", async () => {
    const tracker = new InflightTracker({ zeroConfirmMs: 50 });
    const wait = watch(tracker, ["a"]);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(wait.settled).toBe(false);
  });

  it("waits for an instance that has not reported yet when another one has (a hot-restart child)", async () => {
    const tracker = new InflightTracker({ zeroConfirmMs: 50 });
    tracker.report(report("parent", 9, 0));
    const wait = watch(tracker, ["parent", "child"]);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(wait.settled).toBe(false);
    tracker.report(report("child", 1, 0));
    await vi.advanceTimersByTimeAsync(50);
    expect(wait.settled).toBe(true);
  });

  it("rejects with the signal's reason when aborted", async () => {
    const tracker = new InflightTracker({ zeroConfirmMs: 50 });
    const controller = new AbortController();
    tracker.report(report("a", 1, 1, true, "busy"));
    const wait = watch(tracker, ["a"], controller.signal);
    controller.abort(new Error("deadline"));
    await vi.advanceTimersByTimeAsync(0);
    expect(wait.settled).toBe(true);
    expect((wait.error as Error).message).toBe("deadline");
  });

  it("rejects at once when the signal is already aborted", async () => {
    const tracker = new InflightTracker();
    const wait = watch(tracker, ["a"], AbortSignal.abort(new Error("too late")));
    await vi.advanceTimersByTimeAsync(0);
    expect((wait.error as Error).message).toBe("too late");
  });
});

describe("InflightTracker.status", () => {
  it("is never before a report, reporting after one, silent after three missed heartbeats", () => {
    const tracker = new InflightTracker({ heartbeatMs: 1000 });
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
    const tracker = new InflightTracker({ heartbeatMs: 1000 });
    tracker.report(report("a", 5, 0, false, "heartbeat"));
    vi.advanceTimersByTime(5000);
    tracker.report(report("a", 4, 0, false, "heartbeat"));
    expect(tracker.status("a")).toBe("silent");
  });

  it("is never again once the instance is retired", () => {
    const tracker = new InflightTracker();
    tracker.report(report("a", 1, 0));
    tracker.retire("a");
    expect(tracker.status("a")).toBe("never");
  });
});

describe("InflightTracker options", () => {
  it("refuses a negative zeroConfirmMs", () => {
    expect(() => new InflightTracker({ zeroConfirmMs: -1 })).toThrow(RangeError);
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

  it.each([
    [null, "Report must be a JSON object"],
    [{ epoch: 0, seq: 0, inflight: 0 }, "Report field instance is not a string: undefined"],
    [{ instance: "a", epoch: 0, seq: -1, inflight: 0 }, "Report field seq is not a count: -1"],
    [{ instance: "a", epoch: 0, seq: 1, inflight: 1.5 }, "Report field inflight is not a count: 1.5"],
    [{ instance: "a", epoch: "0", seq: 1, inflight: 1 }, 'Report field epoch is not a count: "0"'],
  ])("refuses %j", (body, message) => {
    expect(() => parseReport(body)).toThrow(message);
  });
});
