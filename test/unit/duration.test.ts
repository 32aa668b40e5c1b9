import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  DurationTooLongError,
  formatDuration,
  MAX_DURATION_MS,
  parseDuration,
} from "../../agent/lib/duration.ts";

describe("parseDuration", () => {
  it.each([
    ["500ms", 500],
    ["5s", 5000],
    ["2m", 120_000],
    ["1h", 3_600_000],
    ["1.5s", 1500],
    ["0s", 0],
    ["3", 3000],
    [" 10s ", 10_000],
    ["2147483647ms", 2_147_483_647],
    ["596h", 2_145_600_000],
  ])("%j is %i ms", (text, ms) => {
    expect(parseDuration(text)).toBe(ms);
  });

  it.each(["", "abc", "-1s", "5 parsecs", "1d", "s", "1e3ms", "5s5"])(
    "refuses %j, quoting it",
    (text) => {
      expect(() => parseDuration(text)).toThrow(RangeError);
      expect(() => parseDuration(text)).toThrow(`"${text}"`);
    },
  );

  it.each(["2147483648ms", "2147484s", "597h", "99999999999999s", "9".repeat(400)])(
    "refuses %j: longer than a timer can hold",
    (text) => {
      expect(() => parseDuration(text)).toThrow(DurationTooLongError);
      expect(() => parseDuration(text)).toThrow(`"${text}"`);
    },
  );

  it("the limit is what setTimeout can hold: 2^31 − 1 ms", () => {
    expect(MAX_DURATION_MS).toBe(2_147_483_647);
  });
});

describe("parseDuration, for any number and unit", () => {
  const units = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, "": 1000 } as const;

  it("returns the number in whole ms when a timer can hold it, and refuses it otherwise", () => {
    fc.assert(
      fc.property(
        fc.nat({ max: 3_000_000_000 }),
        fc.constantFrom(...Object.keys(units)),
        (n, unit) => {
          const ms = n * units[unit as keyof typeof units];
          if (ms <= MAX_DURATION_MS) expect(parseDuration(`${n}${unit}`)).toBe(ms);
          else expect(() => parseDuration(`${n}${unit}`)).toThrow(DurationTooLongError);
        },
      ),
    );
  });

  it("never returns anything but a whole number of ms from 0 to the limit", () => {
    const text = fc.oneof(
      fc.string({ unit: "binary-ascii" }),
      fc.tuple(fc.double({ min: 0, noNaN: true }), fc.constantFrom("ms", "s", "m", "h", "")).map((
        [n, u],
      ) => `${n}${u}`),
    );
    fc.assert(fc.property(text, (t) => {
      let ms: number;
      try {
        ms = parseDuration(t);
      } catch (error) {
        expect(error).toBeInstanceOf(RangeError);
        return;
      }
      expect(Number.isInteger(ms) && ms >= 0 && ms <= MAX_DURATION_MS).toBe(true);
    }));
  });

  it("reads back what formatDuration writes", () => {
    fc.assert(fc.property(fc.nat({ max: MAX_DURATION_MS }), (ms) => {
      expect(parseDuration(formatDuration(ms))).toBe(ms);
    }));
  });
});

describe("formatDuration", () => {
  it.each([
    [0, "0ms"],
    [500, "500ms"],
    [1000, "1s"],
    [1500, "1.5s"],
    [30_000, "30s"],
    [60_000, "1m"],
    [90_000, "90s"],
    [120_000, "2m"],
  ])("%i ms is %j", (ms, text) => {
    expect(formatDuration(ms)).toBe(text);
  });

  it("round-trips what it formats", () => {
    for (const ms of [0, 1, 250, 1000, 2500, 60_000, 90_000, 600_000]) {
      expect(parseDuration(formatDuration(ms))).toBe(ms);
    }
  });
});
