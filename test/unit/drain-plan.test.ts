// When a drain's floor runs from, given `POST /drain?asked_at=`, and when its filters push
// (agent/drain/plan.ts).
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  ASKED_AT_MAX_AGE_MS,
  type DrainPlan,
  floorAt,
  floorFromAsked,
  pushesFrom,
  pushLeadMs,
  untilPushes,
} from "../../agent/drain/plan.ts";

describe("floorFromAsked", () => {
  it("is the caller's start when earlier than now, never more than ASKED_AT_MAX_AGE_MS before it; none otherwise", () => {
    fc.assert(
      fc.property(
        fc.option(fc.integer({ min: 0, max: 2 ** 45 }), { nil: undefined }),
        fc.integer({ min: 0, max: 2 ** 45 }),
        (askedAt, now) => {
          const from = floorFromAsked(askedAt, now);
          if (askedAt === undefined || askedAt >= now) {
            expect(from).toBeUndefined();
            return;
          }
          expect(from).toBe(Math.max(askedAt, now - ASKED_AT_MAX_AGE_MS));
          expect(from).toBeLessThan(now);
          expect(now - from!).toBeLessThanOrEqual(ASKED_AT_MAX_AGE_MS);
        },
      ),
    );
  });
});

const plan = (fields: Partial<DrainPlan>): DrainPlan => ({
  mode: "inflight",
  scope: "inbound",
  failHealthcheck: true,
  drainDelayMs: 0,
  minDrainMs: 5000,
  startedAt: 10_000,
  deadline: 38_000,
  ...fields,
});

describe("pushesFrom", () => {
  it("is a heartbeat's tenth and a round trip before the floor's end or the deadline, whichever comes first; at once when the floor is cut", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 2 ** 40 }),
        fc.integer({ min: 0, max: 60_000 }),
        fc.integer({ min: 0, max: 60_000 }),
        fc.boolean(),
        fc.integer({ min: 100, max: 60_000 }),
        (startedAt, minDrainMs, grace, cut, heartbeatMs) => {
          const floorCut = new AbortController();
          if (cut) floorCut.abort();
          const p = plan({
            startedAt,
            minDrainMs,
            deadline: startedAt + grace,
            floorCut: floorCut.signal,
          });
          const from = pushesFrom(p, heartbeatMs);
          const lead = pushLeadMs(heartbeatMs);
          expect(lead).toBeGreaterThan(heartbeatMs / 10);
          expect(from).toBe(Math.min(floorAt(p), p.deadline) - lead);
          if (cut) expect(from).toBeLessThan(0);
          else expect(from).toBeLessThanOrEqual(startedAt + minDrainMs - lead);
        },
      ),
    );
  });

  it("untilPushes resolves as soon as every app has gone, well before the floor's end", async () => {
    const floorCut = new AbortController();
    const p = plan({
      startedAt: Date.now(),
      minDrainMs: 60_000,
      deadline: Date.now() + 90_000,
      floorCut: floorCut.signal,
    });
    const pushed = untilPushes(p, 1000, new AbortController().signal);
    floorCut.abort();
    await pushed;
    expect(Date.now()).toBeLessThan(pushesFrom({ ...p, floorCut: undefined }, 1000));
  });
});
