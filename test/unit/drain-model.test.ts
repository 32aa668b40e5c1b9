// A property-based test of the agent's side of the drain (tracker + report desk) against a model
// of the filter and the network: random interleavings of requests starting and ending, heartbeats,
// pushes, probes and their answers, lost, late, duplicated and reordered reports, two Envoy
// processes side by side (a hot-restart parent and child). The invariant: a drain never ends
// while a request that was in flight when it was last confirmed is still running, i.e. it only
// ends on a probe that read the true count at zero after the wait began. And it does end once
// everything has finished and the network delivers again.
import fc from "fast-check";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { type InflightReport, InflightTracker } from "../../agent/drain/in-flight.ts";
import { ReportDesk } from "../../agent/status/reports.ts";

beforeEach(() => vi.useFakeTimers());
afterEach(() => vi.useRealTimers());

const INSTANCES = ["parent", "child"] as const;

/** The filter in one Envoy process: its exact counter and its view of the drain. */
interface FilterModel {
  count: number;
  version: number;
  draining: boolean;
  /** Steps at which the requests in flight started. */
  inflight: number[];
}

type Step =
  | { kind: "start"; i: number }
  | { kind: "end"; i: number }
  | { kind: "heartbeat"; i: number }
  | { kind: "deliver"; k: number }
  | { kind: "drop"; k: number }
  | { kind: "duplicate"; k: number }
  | { kind: "answer"; k: number }
  | { kind: "dropAnswer"; k: number }
  | { kind: "time"; ms: number };

const step: fc.Arbitrary<Step> = fc.oneof(
  fc.record({ kind: fc.constant("start" as const), i: fc.nat(1) }),
  fc.record({ kind: fc.constant("end" as const), i: fc.nat(1) }),
  fc.record({ kind: fc.constant("heartbeat" as const), i: fc.nat(1) }),
  fc.record({ kind: fc.constant("deliver" as const), k: fc.nat(20) }),
  fc.record({ kind: fc.constant("deliver" as const), k: fc.nat(20) }),
  fc.record({ kind: fc.constant("drop" as const), k: fc.nat(20) }),
  fc.record({ kind: fc.constant("duplicate" as const), k: fc.nat(20) }),
  fc.record({ kind: fc.constant("answer" as const), k: fc.nat(20) }),
  fc.record({ kind: fc.constant("answer" as const), k: fc.nat(20) }),
  fc.record({ kind: fc.constant("dropAnswer" as const), k: fc.nat(20) }),
  fc.record({ kind: fc.constant("time" as const), ms: fc.integer({ min: 1, max: 1500 }) }),
);

async function run(before: Step[], during: Step[]): Promise<void> {
  const tracker = new InflightTracker({ heartbeatMs: 1000 });
  let draining = false;
  const desk = new ReportDesk(tracker, { heartbeatMs: 1000, draining: () => draining });
  const filters = new Map<string, FilterModel>();
  for (const id of INSTANCES) {
    tracker.expect(id);
    filters.set(id, { count: 0, version: 0, draining: false, inflight: [] });
  }
  const reports: InflightReport[] = [];
  const answers: Array<{ instance: string; draining: boolean; probe?: number }> = [];
  /** What each probe read: the true count and the step it was read at. */
  const probeReads = new Map<number, { instance: string; count: number; at: number }>();
  let now = 0;
  let waitStartedAt = Infinity;
  let ended: number | undefined;

  const send = (id: string, reason: string, probe?: number) => {
    const f = filters.get(id)!;
    if (probe !== undefined) probeReads.set(probe, { instance: id, count: f.count, at: now });
    reports.push({ instance: id, epoch: 0, seq: f.version, inflight: f.count, draining: f.draining, reason, ...(probe ? { probe } : {}) });
  };
  const apply = async (s: Step) => {
    now++;
    const pick = <T>(list: T[], k: number) => (list.length ? list.splice(k % list.length, 1)[0] : undefined);
    switch (s.kind) {
      case "start": {
        const f = filters.get(INSTANCES[s.i])!;
        f.count++;
        f.version++;
        f.inflight.push(now);
        if (f.draining && f.count === 1) send(INSTANCES[s.i], "busy");
        break;
      }
      case "end": {
        const f = filters.get(INSTANCES[s.i])!;
        if (f.count === 0) break;
        f.count--;
        f.version++;
        f.inflight.shift();
        if (f.draining && f.count === 0) send(INSTANCES[s.i], "zero");
        break;
      }
      case "heartbeat":
        send(INSTANCES[s.i], "heartbeat");
        break;
      case "deliver": {
        const r = pick(reports, s.k);
        if (r) desk.answer(r).then((a) => answers.push({ instance: r.instance, ...a }));
        break;
      }
      case "drop":
        pick(reports, s.k);
        break;
      case "duplicate":
        if (reports.length) reports.push({ ...reports[s.k % reports.length] });
        break;
      case "answer": {
        const a = pick(answers, s.k);
        if (!a) break;
        const f = filters.get(a.instance)!;
        if (a.draining && !f.draining) {
          f.draining = true;
          send(a.instance, "drain_ack");
        }
        if (a.probe !== undefined) send(a.instance, "probe", a.probe);
        break;
      }
      case "dropAnswer":
        pick(answers, s.k);
        break;
      case "time":
        await vi.advanceTimersByTimeAsync(s.ms);
        break;
    }
    await vi.advanceTimersByTimeAsync(0);
  };

  for (const s of before) await apply(s);
  draining = true;
  desk.drainStarted();
  let broken: unknown;
  // Two waits in a row, as the drain does after its floor: the second needs its own probe.
  let rounds = 0;
  const startWait = (): Promise<void> => {
    waitStartedAt = now;
    return tracker.waitForZero([...INSTANCES], new AbortController().signal).then(() => {
      try {
        checkEnd();
      } catch (error) {
        broken = error;
      }
      if (++rounds === 1) return startWait();
      ended = now;
    });
  };
  const checkEnd = (): void => {
    for (const id of INSTANCES) {
      // The view that ended it was confirmed by a probe issued after the wait began, which read
      // the true count at zero; so every request in flight now started after that read.
      const probe = tracker.view(id)!.confirmedBy;
      const read = probeReads.get(probe);
      expect(read, `${id}: ended without a probe read`).toBeDefined();
      expect(read!.instance).toBe(id);
      expect(read!.count).toBe(0);
      expect(read!.at).toBeGreaterThanOrEqual(waitStartedAt);
      expect(filters.get(id)!.inflight.every((startedAt) => startedAt > read!.at)).toBe(true);
    }
  };
  const wait = startWait();
  for (const s of during) {
    await apply(s);
    if (ended !== undefined) break;
  }
  if (broken) throw broken;
  // Everything finishes, the network delivers again, heartbeats go on: the drain must end.
  for (const id of INSTANCES) while (filters.get(id)!.count > 0) await apply({ kind: "end", i: INSTANCES.indexOf(id as never) });
  for (let round = 0; round < 12 && ended === undefined; round++) {
    for (const i of [0, 1]) await apply({ kind: "heartbeat", i });
    while (reports.length || answers.length) {
      if (reports.length) await apply({ kind: "deliver", k: 0 });
      if (answers.length) await apply({ kind: "answer", k: 0 });
    }
    await apply({ kind: "time", ms: 1000 });
  }
  await wait;
  if (broken) throw broken;
  expect(ended, "the drain never ended after everything finished").toBeDefined();
}

describe("the drain, modelled against a lossy network", () => {
  it("never ends on a count that was not read at zero after the wait began, and always ends once all is done", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(step, { maxLength: 30 }), fc.array(step, { maxLength: 80 }), run),
      { numRuns: 300 },
    );
  });
});
