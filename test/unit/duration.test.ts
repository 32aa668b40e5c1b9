import { describe, expect, it } from "vitest";
import { formatDuration, parseDuration } from "../../agent/duration.ts";

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
  ])("%j is %i ms", (text, ms) => {
    expect(parseDuration(text)).toBe(ms);
  });

  it.each(["", "abc", "-1s", "5 parsecs", "1d", "s", "1e3ms", "5s5"])("refuses %j, quoting it", (text) => {
    expect(() => parseDuration(text)).toThrow(RangeError);
    expect(() => parseDuration(text)).toThrow(`"${text}"`);
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
    for (const ms of [0, 1, 250, 1000, 2500, 60_000, 90_000, 600_000]) expect(parseDuration(formatDuration(ms))).toBe(ms);
  });
});
