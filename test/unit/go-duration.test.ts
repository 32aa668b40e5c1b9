import { readFileSync } from "node:fs";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  DurationTooLongError,
  parseAnyDuration,
  parseGoDuration,
} from "../../agent/lib/duration.ts";

/** What Go 1.26's time.ParseDuration made of each string (test/fixtures/go-duration/generate.mjs). */
const goAnswers: [string, string | null][] = JSON.parse(
  readFileSync(new URL("../fixtures/go-duration/expected.json", import.meta.url), "utf8"),
);

/** Go's `Duration.String()`: `1h2m3.5s`, `1.5µs`, `-2m0s`, `0s`. */
function goString(ns: bigint): string {
  const sign = ns < 0n ? "-" : "";
  const abs = ns < 0n ? -ns : ns;
  const decimal = (n: bigint, digits: number) => {
    const text = n.toString().padStart(digits + 1, "0");
    const fraction = text.slice(-digits).replace(/0+$/, "");
    return text.slice(0, -digits) + (fraction ? `.${fraction}` : "");
  };
  if (abs === 0n) return "0s";
  if (abs < 1000n) return `${sign}${abs}ns`;
  if (abs < 1_000_000n) return `${sign}${decimal(abs, 3)}µs`;
  if (abs < 1_000_000_000n) return `${sign}${decimal(abs, 6)}ms`;
  const h = abs / 3_600_000_000_000n;
  const m = (abs / 60_000_000_000n) % 60n;
  const s = decimal(abs % 60_000_000_000n, 9);
  return `${sign}${h > 0n ? `${h}h` : ""}${h > 0n || m > 0n ? `${m}m` : ""}${s}s`;
}

const nsToMs = (ns: bigint) => Number(ns) / 1e6;

describe("parseGoDuration reads what Go's time.ParseDuration reads", () => {
  it(`agrees with Go on ${goAnswers.length} strings (signs, µs and μs, fractions, overflow)`, () => {
    const disagreements = goAnswers.flatMap(([text, ns]) => {
      let ms: number | null;
      try {
        ms = parseGoDuration(text);
      } catch (error) {
        expect(error).toBeInstanceOf(RangeError);
        ms = null;
      }
      const expected = ns === null ? null : nsToMs(BigInt(ns));
      return Object.is(ms, expected) || ms === expected
        ? []
        : [`${JSON.stringify(text)}: ${ms}, Go: ${expected}`];
    });
    expect(disagreements).toEqual([]);
  });

  it("reads back every duration Go writes (Duration.String) to the nanosecond", () => {
    fc.assert(fc.property(fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }), (ns) => {
      expect(parseGoDuration(goString(ns))).toBe(nsToMs(ns));
    }));
  });

  it("adds up whole parts in any unit, with a sign applying to the whole", () => {
    const unitNs = {
      h: 3_600_000_000_000n,
      m: 60_000_000_000n,
      s: 1_000_000_000n,
      ms: 1_000_000n,
      us: 1000n,
      "µs": 1000n,
      "μs": 1000n,
      ns: 1n,
    };
    const part = fc.record({
      n: fc.nat({ max: 100_000 }),
      unit: fc.constantFrom(...(Object.keys(unitNs) as (keyof typeof unitNs)[])),
    });
    fc.assert(
      fc.property(
        fc.constantFrom("", "+", "-"),
        fc.array(part, { minLength: 1, maxLength: 6 }),
        (sign, parts) => {
          const ns = parts.reduce((sum, { n, unit }) => sum + BigInt(n) * unitNs[unit], 0n);
          const ms = parseGoDuration(sign + parts.map(({ n, unit }) => `${n}${unit}`).join(""));
          expect(ms).toBe(sign === "-" && ns !== 0n ? -nsToMs(ns) : nsToMs(ns));
        },
      ),
    );
  });

  it("refuses what is not Go's syntax with a RangeError quoting it", () => {
    fc.assert(fc.property(fc.string(), (text) => {
      try {
        expect(Number.isFinite(parseGoDuration(text))).toBe(true);
      } catch (error) {
        expect(error).toBeInstanceOf(RangeError);
        expect((error as Error).message).toContain(`"${text}"`);
      }
    }));
  });
});

describe("parseAnyDuration: Go's spelling or lastcall's", () => {
  it.each([
    ["1m30s", 90_000],
    [" 1500µs ", 1.5],
    [".5s", 500],
    ["+5s", 5000],
    ["30", 30_000],
    ["1.5", 1500],
  ])("%j is %d ms", (text, ms) => {
    expect(parseAnyDuration(text)).toBe(ms);
  });

  it.each(["-1s", "-0", "soon", "5s s"])("refuses %j", (text) => {
    expect(() => parseAnyDuration(text)).toThrow(RangeError);
  });

  it.each(["597h", "596h596h", "2147483648ms"])(
    "refuses %j: longer than a timer can hold",
    (text) => {
      expect(() => parseAnyDuration(text)).toThrow(DurationTooLongError);
    },
  );
});
