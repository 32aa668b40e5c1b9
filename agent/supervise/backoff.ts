/** Options of {@linkcode restartDelay}. */
export interface BackoffOptions {
  /** First delay. @default 200 */
  initialMs?: number;
  /** Cap. @default 10000 */
  maxMs?: number;
}

/**
 * Delay before crash restart number `attempt` (1-based): 200 ms, doubling, capped.
 *
 * @example
 * ```ts
 * [1, 2, 3].map((n) => restartDelay(n)); // [200, 400, 800]
 * ```
 */
export function restartDelay(attempt: number, options: BackoffOptions = {}): number {
  const initial = options.initialMs ?? 200;
  const max = options.maxMs ?? 10_000;
  if (!Number.isInteger(attempt) || attempt < 1) {
    throw new RangeError(`Restart attempt must be 1 or more: ${attempt}`);
  }
  return Math.min(max, initial * 2 ** Math.min(attempt - 1, 30));
}

/** A retry budget per desired config: spent by crashes, refilled by a new config or a stable run. */
export class RestartBudget {
  #spent = 0;
  readonly limit: number;
  readonly stableMs: number;

  /** @param limit restarts allowed; @param stableMs a run this long refills the budget */
  constructor(limit: number, stableMs = 60_000) {
    this.limit = limit;
    this.stableMs = stableMs;
  }

  /** Restarts spent since the last refill. */
  get spent(): number {
    return this.#spent;
  }

  /** Records a crash after a run of `ranMs`; returns the attempt number, or undefined when exhausted. */
  spend(ranMs: number): number | undefined {
    if (ranMs >= this.stableMs) this.#spent = 0;
    if (this.#spent >= this.limit) return undefined;
    return ++this.#spent;
  }

  /** Refills the budget (the desired config changed). */
  refill(): void {
    this.#spent = 0;
  }
}
