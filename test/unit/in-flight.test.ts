// The tracker decides when "zero in flight" is real: only a pull (the answer to a probe issued
// after the wait began) ends a wait; reports are hints. Time is faked: never slept.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { type InflightReport, InflightTracker } from "../../agent/drain/in-flight.ts";

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

const report = (
  instance: string,
  inflight: number,
  reason = "zero",
  probe?: number,
  draining = true,
): InflightReport => ({
  instance,
  epoch: 0,
  inflight,
  draining,
  reason,
  ...(probe === undefined ? {} : { probe }),
});

/** A tracker that knows these live processes. */
function tracking(...instances: string[]): InflightTracker {
  const tracker = new InflightTracker({ heartbeatMs: 1000, now: () => Date.now() });
  for (const id of instances) tracker.expect(id);
  return tracker;
}

/** Exposes whether a promise settled, with what. */
function watchPromise<T>(promise: Promise<T>) {
  const state = { settled: false, value: undefined as T | undefined, error: undefined as unknown };
  promise.then((value) => {
    state.settled = true;
    state.value = value;
  }, (error) => {
    state.settled = true;
    state.error = error;
  });
  return state;
}

const watch = (
  tracker: InflightTracker,
  instances: string[],
  signal = new AbortController().signal,
) => watchPromise(tracker.waitForZero(instances, signal));

const flush = () => vi.advanceTimersByTimeAsync(0);

/** The filter's answer to a probe the agent sends down now: a fresh read of the gauge. */
function answerProbe(tracker: InflightTracker, instance: string, inflight: number): number {
  const probe = tracker.probeFor(instance);
  expect(probe, `a probe of ${instance} is wanted`).toBeDefined();
  expect(tracker.report(report(instance, inflight, "probe", probe))).toBe("accepted");
  return probe!;
}

describe("InflightTracker.pull", () => {
  it("wants a probe of every instance and resolves with the sum the probes read", async () => {
    const tracker = tracking("parent", "child");
    const wanted: string[] = [];
    tracker.onProbeWanted((id) => wanted.push(id));
    tracker.report(report("parent", 9, "heartbeat", undefined, false)); // a hint: not a pull
    const pull = watchPromise(tracker.pull(["parent", "child"], new AbortController().signal));
    expect(wanted).toEqual(["parent", "child"]);
    answerProbe(tracker, "parent", 2);
    await flush();
    expect(pull.settled).toBe(false); // the child is not read yet
    answerProbe(tracker, "child", 3);
    await flush();
    expect(pull).toMatchObject({ settled: true, value: 5 });
    // Done: no more probes (a probe answer is not probed again).
    expect(tracker.probeFor("parent")).toBeUndefined();
    expect(tracker.probeFor("child")).toBeUndefined();
  });

  it("ignores the answer of a probe issued before the call", async () => {
    const tracker = tracking("a");
    void tracker.pull(["a"], new AbortController().signal);
    const old = tracker.probeFor("a")!;
    const pull = watchPromise(tracker.pull(["a"], new AbortController().signal));
    tracker.report(report("a", 0, "probe", old)); // read before the second pull began
    await flush();
    expect(pull.settled).toBe(false);
    answerProbe(tracker, "a", 4);
    await flush();
    expect(pull.value).toBe(4);
  });

  it("asks again after a lost probe: each answer of a report carries a new id", async () => {
    const tracker = tracking("a");
    const pull = watchPromise(tracker.pull(["a"], new AbortController().signal));
    const lost = tracker.probeFor("a")!;
    const again = tracker.probeFor("a")!;
    expect(again).toBeGreaterThan(lost);
    tracker.report(report("a", 1, "probe", again));
    await flush();
    expect(pull.value).toBe(1);
  });

  it("counts an exited instance 0, and resolves with 0 when none is live", async () => {
    const tracker = tracking("parent", "child");
    const pull = watchPromise(tracker.pull(["parent", "child"], new AbortController().signal));
    answerProbe(tracker, "child", 1);
    await flush();
    expect(pull.settled).toBe(false);
    tracker.retire("parent"); // its streams died with it
    await flush();
    expect(pull.value).toBe(1);
    tracker.retire("child");
    expect(await tracker.pull(["parent", "child"], new AbortController().signal)).toBe(0);
  });

  it("rejects with the signal's reason when aborted, and at once when already aborted", async () => {
    const tracker = tracking("a");
    const controller = new AbortController();
    const pull = watchPromise(tracker.pull(["a"], controller.signal));
    controller.abort(new Error("deadline"));
    await flush();
    expect((pull.error as Error).message).toBe("deadline");
    await expect(tracker.pull(["a"], AbortSignal.abort(new Error("too late")))).rejects.toThrow(
      "too late",
    );
  });
});

describe("InflightTracker.waitForZero", () => {
  it("begins with a pull: a probe is wanted before any report", async () => {
    const tracker = tracking("a");
    const wanted: string[] = [];
    tracker.onProbeWanted((id) => wanted.push(id));
    expect(tracker.probeFor("a")).toBeUndefined();
    const wait = watch(tracker, ["a"]);
    expect(wanted).toEqual(["a"]);
    answerProbe(tracker, "a", 0);
    await flush();
    expect(wait).toEqual({ settled: true, value: undefined, error: undefined });
  });

  it("does not end on a pushed zero alone: it pulls, and ends on the probe's zero", async () => {
    const tracker = tracking("a");
    const wait = watch(tracker, ["a"]);
    answerProbe(tracker, "a", 1); // busy when the wait began
    const wanted: string[] = [];
    tracker.onProbeWanted((id) => wanted.push(id));
    expect(tracker.report(report("a", 0, "zero"))).toBe("accepted");
    await vi.advanceTimersByTimeAsync(10_000);
    expect(wait.settled).toBe(false);
    expect(wanted).toEqual(["a"]);
    answerProbe(tracker, "a", 0);
    await flush();
    expect(wait.settled).toBe(true);
  });

  it("a stale zero (arriving after a busy) only causes a pull, whose read decides", async () => {
    const tracker = tracking("a");
    const wait = watch(tracker, ["a"]);
    answerProbe(tracker, "a", 1);
    tracker.report(report("a", 1, "busy"));
    tracker.report(report("a", 0, "zero")); // composed before the busy, delivered after it
    expect(tracker.probeFor("a")).toBeDefined(); // a pull, not an end
    const probe = tracker.probeFor("a")!;
    tracker.report(report("a", 1, "probe", probe)); // the gauge says a stream is in flight
    await vi.advanceTimersByTimeAsync(10_000);
    expect(wait.settled).toBe(false);
    expect(tracker.probeFor("a")).toBeUndefined(); // nothing to pull until the next hint
  });

  it.each([
    ["a pushed zero", "zero", true],
    ["a drain ack", "drain_ack", true],
    ["a heartbeat", "heartbeat", true],
    ["a heartbeat of a VM that does not know of the drain", "heartbeat", false],
  ])("re-pulls on %s saying 0 while it waits", async (_name, reason, draining) => {
    const tracker = tracking("a");
    const wait = watch(tracker, ["a"]);
    answerProbe(tracker, "a", 2);
    expect(tracker.probeFor("a")).toBeUndefined();
    tracker.report(report("a", 0, reason, undefined, draining));
    answerProbe(tracker, "a", 0);
    await flush();
    expect(wait.settled).toBe(true);
  });

  it("re-pulls on every zero hint, and not on a busy one", async () => {
    const tracker = tracking("a");
    const wanted: string[] = [];
    tracker.onProbeWanted((id) => wanted.push(id));
    const wait = watch(tracker, ["a"]);
    for (let round = 0; round < 3; round++) {
      answerProbe(tracker, "a", 1); // the count moved back up before each read
      tracker.report(report("a", 1, "busy"));
      tracker.report(report("a", 3, "heartbeat"));
      expect(tracker.probeFor("a")).toBeUndefined();
      tracker.report(report("a", 0, "zero"));
    }
    expect(wanted).toEqual(["a", "a", "a", "a"]);
    await flush();
    expect(wait.settled).toBe(false);
    answerProbe(tracker, "a", 0);
    await flush();
    expect(wait.settled).toBe(true);
  });

  it("ends on the zero of any probe issued after it began, even one older than the latest want", async () => {
    const tracker = tracking("a");
    const wait = watch(tracker, ["a"]);
    const first = tracker.probeFor("a")!;
    tracker.report(report("a", 0, "zero")); // wants a newer probe
    tracker.report(report("a", 0, "probe", first)); // read after the wait began: 0 then
    await flush();
    expect(wait.settled).toBe(true);
  });

  it("counts only probes issued after the wait began (a zero read before it is read again)", async () => {
    const tracker = tracking("a");
    const first = watch(tracker, ["a"]);
    answerProbe(tracker, "a", 0);
    await flush();
    expect(first.settled).toBe(true);
    const second = watch(tracker, ["a"]);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(second.settled).toBe(false);
    answerProbe(tracker, "a", 0);
    await flush();
    expect(second.settled).toBe(true);
  });

  it("ignores the answer of a probe issued before the wait", async () => {
    const tracker = tracking("a");
    void tracker.pull(["a"], new AbortController().signal);
    const oldProbe = tracker.probeFor("a")!;
    const wait = watch(tracker, ["a"]);
    expect(tracker.report(report("a", 0, "probe", oldProbe))).toBe("accepted");
    await vi.advanceTimersByTimeAsync(1000);
    expect(wait.settled).toBe(false);
  });

  it("an older probe's answer arriving after a newer one's is stale and ignored", async () => {
    const tracker = tracking("a");
    const wait = watch(tracker, ["a"]);
    const older = tracker.probeFor("a")!;
    const newer = tracker.probeFor("a")!;
    expect(tracker.report(report("a", 1, "probe", newer))).toBe("accepted");
    expect(tracker.report(report("a", 0, "probe", older))).toBe("stale");
    expect(tracker.staleReports).toBe(1);
    expect(tracker.view("a")?.pulled).toMatchObject({ probe: newer, inflight: 1 });
    expect(tracker.inflight(["a"])).toBe(1);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(wait.settled).toBe(false);
  });

  it("a probe answer with an id the agent never issued changes nothing", async () => {
    const tracker = tracking("a");
    const wait = watch(tracker, ["a"]);
    expect(tracker.report(report("a", 0, "probe", 1_000_000))).toBe("stale");
    await flush();
    expect(wait.settled).toBe(false);
    expect(tracker.view("a")).toBeUndefined();
    answerProbe(tracker, "a", 0); // a real probe still ends it
    await flush();
    expect(wait.settled).toBe(true);
  });

  it("waits for every instance: a hot-restart parent and child", async () => {
    const tracker = tracking("parent", "child");
    const wait = watch(tracker, ["parent", "child"]);
    answerProbe(tracker, "parent", 0);
    answerProbe(tracker, "child", 2);
    await vi.advanceTimersByTimeAsync(1000);
    expect(wait.settled).toBe(false);
    expect(tracker.probeFor("parent")).toBeUndefined(); // the parent's zero stands
    tracker.report(report("child", 0, "zero"));
    expect(tracker.probeFor("parent")).toBeUndefined(); // a child's hint pulls the child only
    answerProbe(tracker, "child", 0);
    await flush();
    expect(wait.settled).toBe(true);
  });

  it("keeps probe answers per instance: a child's lower probe id is not stale against its parent's", () => {
    const tracker = tracking("parent", "child");
    void tracker.pull(["parent", "child"], new AbortController().signal);
    const child = tracker.probeFor("child")!;
    const parent = tracker.probeFor("parent")!;
    tracker.report(report("parent", 3, "probe", parent));
    expect(tracker.report(report("child", 1, "probe", child))).toBe("accepted");
    expect(tracker.inflight(["parent", "child"])).toBe(4);
    expect(tracker.staleReports).toBe(0);
  });

  it("stops pulling on zero hints once the wait has ended or been aborted", async () => {
    const tracker = tracking("a", "b");
    const ended = watch(tracker, ["a"]);
    answerProbe(tracker, "a", 0);
    const controller = new AbortController();
    const aborted = watch(tracker, ["b"], controller.signal);
    answerProbe(tracker, "b", 1);
    controller.abort(new Error("deadline"));
    await flush();
    expect(ended.settled && aborted.settled).toBe(true);
    tracker.report(report("a", 0, "zero"));
    tracker.report(report("b", 0, "zero"));
    expect(tracker.probeFor("a")).toBeUndefined();
    expect(tracker.probeFor("b")).toBeUndefined();
  });

  it("keeps no state for an instance it was not told about", () => {
    const tracker = tracking("a");
    expect(tracker.report(report("x".repeat(200), 0))).toBe("unknown");
    expect(tracker.view("x".repeat(200))).toBeUndefined();
    expect(tracker.unknownReports).toBe(1);
    tracker.retire("a");
    expect(tracker.report(report("a", 0))).toBe("unknown");
  });

  it("a busy instance that exits (retired) no longer holds the wait", async () => {
    const tracker = tracking("parent", "child");
    const wait = watch(tracker, ["parent", "child"]);
    answerProbe(tracker, "parent", 1);
    answerProbe(tracker, "child", 0);
    await vi.advanceTimersByTimeAsync(1000);
    expect(wait.settled).toBe(false);
    tracker.retire("parent");
    await flush();
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
    const wait = watch(tracker, ["a"], controller.signal);
    answerProbe(tracker, "a", 1);
    controller.abort(new Error("deadline"));
    await flush();
    expect(wait.settled).toBe(true);
    expect((wait.error as Error).message).toBe("deadline");
  });

  it("rejects at once when the signal is already aborted", async () => {
    const tracker = tracking("a");
    const wait = watch(tracker, ["a"], AbortSignal.abort(new Error("too late")));
    await flush();
    expect((wait.error as Error).message).toBe("too late");
  });
});

describe("InflightTracker.status", () => {
  it("is never before a report, reporting after one, silent after three missed heartbeats", () => {
    const tracker = tracking("a");
    expect(tracker.status("a")).toBe("never");
    tracker.report(report("a", 0, "heartbeat", undefined, false));
    expect(tracker.status("a")).toBe("reporting");
    vi.advanceTimersByTime(3000);
    expect(tracker.status("a")).toBe("reporting");
    vi.advanceTimersByTime(1);
    expect(tracker.status("a")).toBe("silent");
    tracker.report(report("a", 0, "heartbeat", undefined, false));
    expect(tracker.status("a")).toBe("reporting");
    expect(tracker.view("a")?.reports).toBe(2);
  });

  it("a stale probe answer does not make a silent filter look alive", () => {
    const tracker = tracking("a");
    void tracker.pull(["a"], new AbortController().signal);
    const older = tracker.probeFor("a")!;
    answerProbe(tracker, "a", 0);
    vi.advanceTimersByTime(5000);
    expect(tracker.report(report("a", 0, "probe", older))).toBe("stale");
    expect(tracker.status("a")).toBe("silent");
  });

  it("is never again once the instance is retired", () => {
    const tracker = tracking("a");
    tracker.report(report("a", 0));
    tracker.retire("a");
    expect(tracker.status("a")).toBe("never");
  });
});
