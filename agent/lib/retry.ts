// Calling an operation again after it failed, with a pause between tries, until it succeeds,
// the tries run out or a signal aborts.
import { delay } from "./delay.ts";

/** The signal of retries nothing ends. */
const NEVER = new AbortController().signal;

/** Options of {@linkcode retry}. */
export interface RetryOptions {
  /**
   * How many times to call the operation before giving up.
   *
   * @default {Infinity}
   */
  maxAttempts?: number;
  /**
   * The pause after failed try number `attempt` (1-based), in ms: a number, or a function of the
   * attempt for a pause that grows.
   *
   * @default {0}
   */
  delayMs?: number | ((attempt: number) => number);
  /** Ends the retries: `retry` then rejects with the signal's reason. Each try gets it too. */
  signal?: AbortSignal;
  /**
   * Told of each failed try (not of one cut short by `signal`), before the pause.
   *
   * @default {() => {}}
   */
  onError?: (error: unknown, attempt: number) => void;
}

/** The operation failed as many times as {@linkcode RetryOptions.maxAttempts} allows. */
export class RetryError extends Error {
  override name = "RetryError";
  /**
   * @param cause The last try's error
   * @param attempts How many tries were made
   */
  constructor(cause: unknown, readonly attempts: number) {
    super(`Retrying exceeded the maximum number of attempts: ${attempts}`, { cause });
  }
}

/**
 * Calls `fn` until it resolves, pausing between failed tries.
 *
 * @param fn The operation; its rejection means "try again"
 * @param options How often, how long to pause, and what ends the retries
 * @returns What `fn` resolved with
 * @example Ask a busy Envoy again, less and less often, until the deadline
 * ```ts
 * await retry((signal) => admin.failHealthcheck(signal), {
 *   delayMs: (attempt) => Math.min(250 * attempt, 1000),
 *   signal: AbortSignal.timeout(30_000),
 * });
 * ```
 * @throws {RangeError} when `maxAttempts` is not a whole number of 1 or more
 * @throws {RetryError} when every try failed (its `cause` is the last error)
 * @throws the signal's reason when `signal` aborts
 */
export async function retry<T>(
  fn: (signal: AbortSignal) => Promise<T>,
  options: RetryOptions = {},
): Promise<T> {
  const { maxAttempts = Infinity, delayMs = 0, signal = NEVER, onError } = options;
  if (!(maxAttempts >= 1) || (maxAttempts !== Infinity && !Number.isInteger(maxAttempts))) {
    throw new RangeError(
      `Cannot retry: maxAttempts must be a whole number of 1 or more, not ${maxAttempts}`,
    );
  }
  const pause = typeof delayMs === "number" ? () => delayMs : delayMs;
  for (let attempt = 1;; attempt++) {
    signal.throwIfAborted();
    try {
      return await fn(signal);
    } catch (error) {
      if (signal.aborted) throw signal.reason;
      onError?.(error, attempt);
      if (attempt >= maxAttempts) throw new RetryError(error, attempt);
    }
    await delay(pause(attempt), signal);
  }
}
