// The report desk: a long poll. Reports with nothing to say back are held (90 % of the
// heartbeat), so the agent nearly always has a call in hand to send a probe down. Time is faked:
// a held report comes back only when the test moves the clock.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { type InflightReport, InflightTracker } from "../../agent/drain/in-flight.ts";
import { MAX_HOLDS, type ReportAnswer, ReportDesk } from "../../agent/status/reports.ts";

beforeEach(() => vi.useFakeTimers());
afterEach(() => vi.useRealTimers());

const HEARTBEAT_MS = 1000;
const HOLD_MS = 900; // 90 % of the heartbeat

const report = (
  instance: string,
  reason: string,
  fields: Partial<InflightReport> = {},
): InflightReport => ({
  instance,
  epoch: 0,
  inflight: 0,
  draining: false,
  reason,
  ...fields,
});

/** A desk over a tracker of live `instances`, draining when `drain.on` is set (quiet: `drain.quiet`). */
function desk(...instances: string[]) {
  const tracker = new InflightTracker({ heartbeatMs: HEARTBEAT_MS, now: () => Date.now() });
  for (const id of instances) tracker.expect(id);
  const drain = { on: false, quiet: false };
  return {
    tracker,
    drain,
    desk: new ReportDesk(tracker, {
      heartbeatMs: HEARTBEAT_MS,
      draining: () => drain.on,
      quiet: () => drain.quiet,
    }),
  };
}

/** Sends a report to the desk and exposes its answer once it comes. */
function send(d: ReportDesk, r: InflightReport) {
  const state: { answer?: ReportAnswer } = {};
  void d.answer(r).then((a) => (state.answer = a));
  return state;
}

const flush = () => vi.advanceTimersByTimeAsync(0);

describe("ReportDesk holds a report it has nothing to say to", () => {
  it.each([
    ["heartbeat", false, 0],
    ["heartbeat", true, 0],
    ["zero", true, 0],
    ["busy", true, 1],
    ["drain_ack", true, 0],
  ])(
    "a %s (draining known %s) for 90 %% of the heartbeat, then answers it with nothing new",
    async (reason, draining, inflight) => {
      const { desk: d, drain } = desk("a");
      drain.on = draining;
      const held = send(d, report("a", reason, { draining, inflight }));
      await vi.advanceTimersByTimeAsync(HOLD_MS - 1);
      expect(held.answer).toBeUndefined();
      await vi.advanceTimersByTimeAsync(1);
      expect(held.answer).toEqual({ draining, probe: undefined });
    },
  );

  it("a probe answer nobody waits for is held like any other report", async () => {
    const { tracker, desk: d } = desk("a");
    void tracker.pull(["a"], new AbortController().signal);
    const first = send(d, report("a", "heartbeat"));
    await flush();
    const probe = first.answer!.probe!;
    const answer = send(d, report("a", "probe", { probe }));
    await flush();
    expect(answer.answer).toBeUndefined();
    await vi.advanceTimersByTimeAsync(HOLD_MS);
    expect(answer.answer).toEqual({ draining: false, probe: undefined });
  });

  it(`holds at most ${MAX_HOLDS} reports per instance: one more answers the oldest at once`, async () => {
    const { desk: d } = desk("a", "b");
    const a = Array.from({ length: MAX_HOLDS }, () => send(d, report("a", "heartbeat")));
    const b = send(d, report("b", "heartbeat"));
    await flush();
    expect(a.every((s) => s.answer === undefined)).toBe(true);
    const extra = send(d, report("a", "heartbeat"));
    await flush();
    expect(a[0]!.answer).toEqual({ draining: false, probe: undefined });
    expect(a.slice(1).every((s) => s.answer === undefined)).toBe(true);
    expect(extra.answer).toBeUndefined();
    expect(b.answer).toBeUndefined(); // another instance's holds are its own
  });

  it("answers a report of an instance it does not know at once, and keeps nothing of it", async () => {
    const { tracker, desk: d, drain } = desk("a");
    drain.on = true;
    const stranger = send(d, report("x", "heartbeat", { draining: true }));
    await flush();
    expect(stranger.answer).toEqual({ draining: true });
    expect(tracker.view("x")).toBeUndefined();
  });
});

describe("ReportDesk answers at once", () => {
  it("with a probe when a pull is under way: the report being answered carries it", async () => {
    const { tracker, desk: d } = desk("a");
    const pull = tracker.pull(["a"], new AbortController().signal);
    const first = send(d, report("a", "heartbeat", { inflight: 7 }));
    await flush();
    const probe = first.answer!.probe!;
    expect(probe).toBeGreaterThan(0);
    // The filter reads its gauge and answers the probe: the pull is done, and that answer is
    // not probed again (or the filter would keep answering).
    const answer = send(d, report("a", "probe", { inflight: 2, probe }));
    expect(await pull).toBe(2);
    await vi.advanceTimersByTimeAsync(HOLD_MS);
    expect(answer.answer).toEqual({ draining: false, probe: undefined });
  });

  it("a pull releases the oldest held report of its instance with a probe, and only that one", async () => {
    const { tracker, desk: d } = desk("a", "b");
    const a1 = send(d, report("a", "heartbeat"));
    const a2 = send(d, report("a", "heartbeat"));
    const b1 = send(d, report("b", "heartbeat"));
    await flush();
    void tracker.pull(["a"], new AbortController().signal);
    await flush();
    expect(a1.answer).toEqual({ draining: false, probe: expect.any(Number) });
    expect(a2.answer).toBeUndefined();
    expect(b1.answer).toBeUndefined();
  });

  it("a zero hint that starts a pull carries the probe itself: no held report of its instance is released", async () => {
    const { tracker, desk: d, drain } = desk("a");
    drain.on = true;
    const held = send(d, report("a", "heartbeat", { draining: true, inflight: 1 }));
    const wait = tracker.waitForZero(["a"], new AbortController().signal);
    await flush();
    // The wait began with a pull: the held report went back with the first probe, which the
    // filter answers with a busy count.
    const first = held.answer!.probe!;
    const busy = send(d, report("a", "probe", { draining: true, inflight: 1, probe: first }));
    const other = send(d, report("a", "heartbeat", { draining: true, inflight: 1 }));
    await flush();
    expect(busy.answer).toBeUndefined(); // nothing wanted: both held
    expect(other.answer).toBeUndefined();
    const zero = send(d, report("a", "zero", { draining: true }));
    await flush();
    expect(zero.answer).toEqual({ draining: true, probe: expect.any(Number) });
    expect(zero.answer!.probe).toBeGreaterThan(first);
    expect(other.answer).toBeUndefined();
    send(d, report("a", "probe", { draining: true, probe: zero.answer!.probe }));
    await wait;
  });

  it("tells a filter VM that does not know of the drain yet, with no hold", async () => {
    const { desk: d, drain } = desk("a");
    drain.on = true;
    const uninformed = send(d, report("a", "heartbeat", { inflight: 3 }));
    await flush();
    expect(uninformed.answer).toEqual({ draining: true, probe: undefined });
    // Once it knows, its reports are held again.
    const informed = send(d, report("a", "drain_ack", { draining: true, inflight: 3 }));
    await flush();
    expect(informed.answer).toBeUndefined();
  });
});

describe("ReportDesk.tellFilters", () => {
  it("answers every held report of every instance at once, saying draining", async () => {
    const { desk: d, drain } = desk("a", "b");
    const held = [
      ...Array.from({ length: 5 }, () => send(d, report("a", "heartbeat"))),
      ...Array.from({ length: 3 }, () => send(d, report("b", "heartbeat"))),
    ];
    await flush();
    expect(held.every((s) => s.answer === undefined)).toBe(true);
    drain.on = true;
    d.tellFilters();
    await flush();
    expect(held.map((s) => s.answer)).toEqual(
      held.map(() => ({ draining: true, probe: undefined })),
    );
  });

  it("with a pull under way, each released report carries a probe of its own", async () => {
    const { tracker, desk: d, drain } = desk("a");
    const held = Array.from({ length: 3 }, () => send(d, report("a", "heartbeat")));
    await flush();
    const unheld = new AbortController();
    const pull = tracker.pull(["a"], unheld.signal); // releases the oldest with a probe
    pull.catch(() => {});
    drain.on = true;
    d.tellFilters();
    await flush();
    const probes = held.map((s) => s.answer?.probe);
    expect(probes.every((p) => p !== undefined)).toBe(true);
    expect(new Set(probes).size).toBe(3);
    expect(held.slice(1).every((s) => s.answer!.draining)).toBe(true);
    unheld.abort();
  });
});

describe("ReportDesk during a drain's floor (quiet)", () => {
  it("tells the filters of the drain with quiet, holds their quiet reports, and tells them at once once they are to push", async () => {
    const { desk: d, drain } = desk("a");
    drain.on = true;
    drain.quiet = true;
    const first = send(d, report("a", "heartbeat", { inflight: 2 }));
    await flush();
    expect(first.answer).toEqual({ draining: true, quiet: true, probe: undefined });
    const held = send(d, report("a", "heartbeat", { draining: true, quiet: true }));
    await flush();
    expect(held.answer).toBeUndefined();
    drain.quiet = false;
    d.tellFilters();
    await flush();
    expect(held.answer).toEqual({ draining: true, probe: undefined });
    // A quiet VM whose report was not held then is told at once; one that pushes is held again.
    const late = send(d, report("a", "heartbeat", { draining: true, quiet: true }));
    const pushing = send(d, report("a", "drain_ack", { draining: true }));
    await flush();
    expect(late.answer).toEqual({ draining: true, probe: undefined });
    expect(pushing.answer).toBeUndefined();
  });
});
