// When a drain's floor runs from, given `POST /drain?asked_at=` (agent/drain/plan.ts).
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { ASKED_AT_MAX_AGE_MS, floorFromAsked } from "../../agent/drain/plan.ts";

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
