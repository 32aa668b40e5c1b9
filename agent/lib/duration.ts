/**
 * The longest duration lastcall accepts: 2^31 − 1 ms (about 24.8 days), the most a timer can
 * hold. Node and Deno fire a longer `setTimeout` at once (Node with only a warning), which
 * would turn `--grace 99999999999999s` into an immediate hard stop.
 */
export const MAX_DURATION_MS = 2 ** 31 - 1;

/** {@linkcode MAX_DURATION_MS} the way error messages say it. */
export const MAX_DURATION_TEXT = `${MAX_DURATION_MS}ms, about 24.8 days`;

/** A duration that parses but is longer than {@linkcode MAX_DURATION_MS}. */
export class DurationTooLongError extends RangeError {
  override name = "DurationTooLongError";
}

/**
 * Parses a duration such as `500ms`, `5s`, `2m`, `1h` (or a bare number of seconds) into
 * milliseconds, at most {@linkcode MAX_DURATION_MS}.
 *
 * @param text The duration as an operator typed it
 * @returns The duration in whole milliseconds
 * @example Parse a drain delay
 * ```ts
 * parseDuration("1.5s"); // 1500
 * ```
 * @throws {RangeError} when the text is not a non-negative duration
 * @throws {DurationTooLongError} when the duration is longer than a timer can hold
 */
export function parseDuration(text: string): number {
  const match = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$/.exec(text);
  if (!match) throw new RangeError(`Cannot parse duration: "${text}" (use e.g. 500ms, 5s, 2m)`);
  const unitMs = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[match[2] ?? "s"] as number;
  const ms = Math.round(Number(match[1]) * unitMs);
  // Also refuses Infinity, which a long enough string of digits becomes.
  if (!(ms <= MAX_DURATION_MS)) throw new DurationTooLongError(`Duration longer than a timer can hold (${MAX_DURATION_TEXT}): "${text}"`);
  return ms;
}

/** Formats milliseconds the way operators type durations, e.g. `1500` → `1.5s`. */
export function formatDuration(ms: number): string {
  if (ms % 60_000 === 0 && ms >= 60_000) return `${ms / 60_000}m`;
  if (ms >= 1000) return `${ms / 1000}s`;
  return `${ms}ms`;
}
