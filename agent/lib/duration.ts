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
  if (!(ms <= MAX_DURATION_MS)) {
    throw new DurationTooLongError(
      `Duration longer than a timer can hold (${MAX_DURATION_TEXT}): "${text}"`,
    );
  }
  return ms;
}

/** Formats milliseconds the way operators type durations, e.g. `1500` → `1.5s`. */
export function formatDuration(ms: number): string {
  if (ms % 60_000 === 0 && ms >= 60_000) return `${ms / 60_000}m`;
  if (ms >= 1000) return `${ms / 1000}s`;
  return `${ms}ms`;
}

/** Go's duration units in nanoseconds, as `time.ParseDuration` knows them. */
const GO_UNIT_NS: Record<string, bigint> = {
  ns: 1n,
  us: 1_000n,
  "µs": 1_000n, // U+00B5 micro sign
  "μs": 1_000n, // U+03BC Greek small letter mu
  ms: 1_000_000n,
  s: 1_000_000_000n,
  m: 60_000_000_000n,
  h: 3_600_000_000_000n,
};

/** 2^63: Go's durations are int64 nanoseconds. */
const GO_LIMIT = 1n << 63n;

/**
 * Parses a duration exactly as Go's `time.ParseDuration` does (`1m30s`, `.5s`, `-1.5h`, `1500µs`,
 * `0`; a bare `5` is not one), into milliseconds: signed, and fractional below a millisecond.
 * Istio's variables, Envoy Gateway's flags and Contour's flags are written this way.
 *
 * @param text The duration as a Go program would read it (no spaces)
 * @returns The duration in milliseconds, Go's whole nanoseconds divided by 10^6
 * @example Parse Envoy Gateway's drain timeout
 * ```ts
 * parseGoDuration("1m30s"); // 90000
 * parseGoDuration("1500us"); // 1.5
 * ```
 * @throws {RangeError} when Go would refuse the text (syntax, unknown unit, beyond int64 ns)
 */
export function parseGoDuration(text: string): number {
  const invalid = () =>
    new RangeError(`Cannot parse Go duration: "${text}" (use e.g. 1m30s, 500ms)`);
  let s = text;
  const negative = s.startsWith("-");
  if (negative || s.startsWith("+")) s = s.slice(1);
  if (s === "0") return 0;
  if (s === "") throw invalid();
  let total = 0n;
  while (s !== "") {
    const part = /^(\d*)(?:\.(\d*))?([^\d.]*)/.exec(s)!;
    const [whole, digits, fraction = "", unit] = part;
    if (digits === "" && fraction === "") throw invalid(); // no digits (".s", or no number at all)
    const unitNs = GO_UNIT_NS[unit];
    if (unitNs === undefined) throw invalid(); // missing or unknown unit
    s = s.slice(whole.length);
    const value = digits === "" ? 0n : BigInt(digits);
    if (value > GO_LIMIT / unitNs) throw invalid();
    let ns = value * unitNs;
    const { numerator, scale } = goFraction(fraction);
    // As Go: the fraction in float64, truncated to whole nanoseconds.
    if (numerator > 0n) ns += BigInt(Math.trunc(Number(numerator) * (Number(unitNs) / scale)));
    if (ns > GO_LIMIT) throw invalid();
    total += ns;
    if (total > GO_LIMIT) throw invalid();
  }
  if (!negative && total > GO_LIMIT - 1n) throw invalid();
  const ms = Number(total) / 1e6;
  return negative && ms !== 0 ? -ms : ms;
}

/** Go's `leadingFraction`: the digits up to where they would overflow, and 10^(digits used). */
function goFraction(digits: string): { numerator: bigint; scale: number } {
  let numerator = 0n;
  let scale = 1;
  for (const digit of digits) {
    const next = numerator * 10n + BigInt(digit);
    if (numerator > (GO_LIMIT - 1n) / 10n || next > GO_LIMIT) break;
    numerator = next;
    scale *= 10;
  }
  return { numerator, scale };
}

/**
 * Parses a duration written the Go way ({@linkcode parseGoDuration}) or lastcall's way
 * ({@linkcode parseDuration}: a bare number is seconds), into milliseconds.
 *
 * @param text The duration; surrounding spaces are ignored
 * @returns The duration in milliseconds (fractional below a millisecond for Go's `us`, `ns`)
 * @example Read a setting written by another tool
 * ```ts
 * parseAnyDuration("1h2m3s"); // 3723000
 * parseAnyDuration("30"); // 30000
 * ```
 * @throws {RangeError} when the text is neither, or negative
 * @throws {DurationTooLongError} when the duration is longer than a timer can hold
 */
export function parseAnyDuration(text: string): number {
  const trimmed = text.trim();
  if (trimmed.startsWith("-")) throw new RangeError(`Cannot parse duration: "${text}" is negative`);
  let ms: number;
  try {
    ms = parseGoDuration(trimmed);
  } catch {
    return parseDuration(trimmed);
  }
  if (ms > MAX_DURATION_MS) {
    throw new DurationTooLongError(
      `Duration longer than a timer can hold (${MAX_DURATION_TEXT}): "${text}"`,
    );
  }
  return ms;
}
