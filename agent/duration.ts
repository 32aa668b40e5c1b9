/**
 * Parses a duration such as `500ms`, `5s`, `2m`, `1h` (or a bare number of seconds) into
 * milliseconds.
 *
 * @example Parse a drain delay
 * ```ts
 * parseDuration("1.5s"); // 1500
 * ```
 * @throws {RangeError} when the text is not a non-negative duration
 */
export function parseDuration(text: string): number {
  const match = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$/.exec(text);
  if (!match) throw new RangeError(`Cannot parse duration: "${text}" (use e.g. 500ms, 5s, 2m)`);
  const unitMs = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[match[2] ?? "s"] as number;
  return Math.round(Number(match[1]) * unitMs);
}

/** Formats milliseconds the way operators type durations, e.g. `1500` → `1.5s`. */
export function formatDuration(ms: number): string {
  if (ms % 60_000 === 0 && ms >= 60_000) return `${ms / 60_000}m`;
  if (ms >= 1000) return `${ms / 1000}s`;
  return `${ms}ms`;
}
