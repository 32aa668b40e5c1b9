/**
 * Resolves after `ms`, or rejects with the signal's reason when it aborts first.
 *
 * @example
 * ```ts
 * await delay(200, AbortSignal.timeout(1000));
 * ```
 */
export function delay(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, Math.max(0, ms));
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * Calls `probe` every `intervalMs` until it returns a value other than undefined; rejects when
 * the signal aborts. A probe that throws is retried (its error goes to `onError`).
 */
export async function pollUntil<T>(
  probe: (signal: AbortSignal) => Promise<T | undefined>,
  intervalMs: number,
  signal: AbortSignal,
  onError?: (error: unknown) => void,
): Promise<T> {
  for (;;) {
    signal.throwIfAborted();
    try {
      const value = await probe(signal);
      if (value !== undefined) return value;
    } catch (error) {
      if (signal.aborted) throw signal.reason;
      onError?.(error);
    }
    await delay(intervalMs, signal);
  }
}

/** An unbounded queue of events consumed one at a time by the agent's loop. */
export class EventQueue<T> {
  readonly #items: T[] = [];
  #wake?: () => void;

  /** Adds an event. */
  push(item: T): void {
    this.#items.push(item);
    this.#wake?.();
  }

  /** Takes the next event, waiting for one. */
  async next(): Promise<T> {
    while (this.#items.length === 0) await new Promise<void>((resolve) => (this.#wake = resolve));
    this.#wake = undefined;
    return this.#items.shift() as T;
  }
}

/** Rejects with the signal's reason when it aborts before `promise` settles. */
export function unlessAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}
