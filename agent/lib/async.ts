import { delay } from "./delay.ts";
import { retry } from "./retry.ts";

/** Waiting, re-exported for the modules that import it from here. */
export { delay };

/** What a probe of {@linkcode pollUntil} that has no value yet "fails" with. */
const NOT_YET = Symbol("not yet");

/**
 * Calls `probe` every `intervalMs` until it returns a value other than undefined; rejects when
 * the signal aborts. A probe that throws is retried (its error goes to `onError`).
 */
export function pollUntil<T>(
  probe: (signal: AbortSignal) => Promise<T | undefined>,
  intervalMs: number,
  signal: AbortSignal,
  onError?: (error: unknown) => void,
): Promise<T> {
  return retry(async (s) => {
    const value = await probe(s);
    if (value === undefined) throw NOT_YET;
    return value;
  }, { delayMs: intervalMs, signal, onError: (error) => error !== NOT_YET && onError?.(error) });
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
