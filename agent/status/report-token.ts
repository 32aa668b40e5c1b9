// The filter's reports change what the agent does (when it stops Envoy), so the status port,
// reachable by pod neighbours when bound to 0.0.0.0, takes them only with the agent's secret.
import { randomBytes, timingSafeEqual } from "node:crypto";

/** The request header that carries the report token. */
export const REPORT_TOKEN_HEADER = "x-lastcall-token";

/** The shortest report token accepted; {@linkcode createReportToken} makes 43 characters. */
export const MIN_REPORT_TOKEN_LENGTH = 16;

/**
 * Makes a fresh report token: 32 random bytes, base64url (safe in headers and JSON).
 *
 * @returns The token
 * @example
 * ```ts
 * const reportToken = createReportToken();
 * ```
 */
export function createReportToken(): string {
  return randomBytes(32).toString("base64url");
}

/**
 * Whether `given` equals the expected token, in time that depends only on the lengths: equal
 * lengths are compared with `timingSafeEqual`; a different length (or no header) is refused
 * after the same comparison of the token with itself.
 *
 * @param given The header's value, if any
 * @param expected The token's UTF-8 bytes
 * @returns True when they are equal
 */
export function reportTokenMatches(given: string | undefined, expected: Uint8Array): boolean {
  const bytes = new TextEncoder().encode(given ?? "");
  if (bytes.byteLength !== expected.byteLength) {
    timingSafeEqual(expected, expected);
    return false;
  }
  return timingSafeEqual(bytes, expected);
}

/**
 * A check of report tokens against `token`, made once (its bytes kept for each comparison).
 *
 * @param token The agent's secret
 * @returns Whether a given header value is the token ({@linkcode reportTokenMatches})
 * @throws {RangeError} when `token` is shorter than {@linkcode MIN_REPORT_TOKEN_LENGTH}
 *   (naming its length, never the token)
 * @example
 * ```ts
 * const matches = reportTokenCheck(createReportToken());
 * matches("wrong"); // false
 * ```
 */
export function reportTokenCheck(token: string): (given: string | undefined) => boolean {
  const length = typeof token === "string" ? token.length : 0;
  if (length < MIN_REPORT_TOKEN_LENGTH) {
    throw new RangeError(
      `Report token too short: ${length} characters (at least ${MIN_REPORT_TOKEN_LENGTH})`,
    );
  }
  const expected = new TextEncoder().encode(token);
  return (given) => reportTokenMatches(given, expected);
}
