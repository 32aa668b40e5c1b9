// Admin calls during a drain: a busy Envoy is asked again, never given up on, until the drain's
// deadline (or the Envoy's exit) aborts the tries.
import { retry } from "../lib/retry.ts";
import type { EventLog } from "../lib/log.ts";

/** Pause between two tries of an admin call that failed during a drain. */
const ADMIN_RETRY_MS = 250;

/**
 * Calls `call` until it succeeds or `signal` aborts, logging each failure; resolves true on
 * success, false when aborted. Each try is bounded by the signal (and the client's own timeout).
 */
export async function retryAdmin(
  what: string,
  call: (signal: AbortSignal) => Promise<unknown>,
  signal: AbortSignal,
  log: EventLog,
): Promise<boolean> {
  try {
    await retry(call, {
      signal,
      delayMs: (attempt) => Math.min(ADMIN_RETRY_MS * attempt, 1000),
      onError: (error, attempt) =>
        log("admin_call_failed", {
          call: what,
          attempt,
          error: String((error as Error).message ?? error),
        }),
    });
    return true;
  } catch {
    return false;
  }
}
