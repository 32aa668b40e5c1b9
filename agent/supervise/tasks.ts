// The agent's long steps (a reload, a crash restart) run one after another beside its loop, so
// the loop stays free to act on a terminate, which aborts them and waits until they gave up.
import type { EventLog } from "../lib/log.ts";

/**
 * One step after another; a step given a key waits its turn once (later ones with that key join it).
 *
 * @example
 * ```ts
 * const tasks = new TaskChain(log, (error) => fail(error));
 * tasks.run((signal) => reload(context, "SIGHUP", signal), { key: "reload" });
 * await tasks.preempt(new Error("terminating"));
 * ```
 */
export class TaskChain {
  readonly #log: EventLog;
  readonly #fatal: (error: unknown) => void;
  readonly #abort = new AbortController();
  readonly #waiting = new Set<string>();
  #tail: Promise<void> = Promise.resolve();

  /** `fatal` gets the failure of a step run with `fatal: true`; others are logged (`task_failed`). */
  constructor(log: EventLog, fatal: (error: unknown) => void) {
    this.#log = log;
    this.#fatal = fatal;
  }

  /**
   * Runs `step` after the steps before it, unless they were pre-empted. Returns false when a step
   * with the same `key` still waits its turn (this one joins it).
   */
  run(
    step: (signal: AbortSignal) => Promise<void>,
    options: { fatal?: boolean; key?: string } = {},
  ): boolean {
    const { fatal = false, key } = options;
    if (key !== undefined && this.#waiting.has(key)) return false;
    if (key !== undefined) this.#waiting.add(key);
    const signal = this.#abort.signal;
    this.#tail = this.#tail.then(async () => {
      if (key !== undefined) this.#waiting.delete(key);
      if (signal.aborted) return;
      try {
        await step(signal);
      } catch (error) {
        if (signal.aborted) return;
        if (fatal) this.#fatal(error);
        else this.#log("task_failed", { error: String(error) });
      }
    });
    return true;
  }

  /** Aborts the step running and those waiting; resolves once they have given up. */
  preempt(reason?: unknown): Promise<void> {
    this.#abort.abort(reason);
    return this.#tail;
  }
}
