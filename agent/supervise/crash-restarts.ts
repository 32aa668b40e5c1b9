// Crash restarts (pilot-agent's loop): an Envoy that exits on its own is started again after a
// backoff, within a budget per desired config; a start that fails counts as one more crash. The
// agent's loop runs the restart itself, as a task a terminate pre-empts.
import { delay } from "../lib/async.ts";
import type { StartError } from "../lib/errors.ts";
import type { EventLog } from "../lib/log.ts";
import type { AgentState } from "../state.ts";
import { RestartBudget, restartDelay } from "./backoff.ts";

/** What crash restarts need from the agent. */
export interface CrashRestartDeps {
  /** Crash restarts allowed per desired config. */
  budget: number;
  log: EventLog;
  state: AgentState;
  /** Aborts when lastcall closes: no restart is due after that. */
  closing: AbortSignal;
  /** The backoff is over: the agent's loop calls {@linkcode CrashRestarts.restart}. */
  due(): void;
  /** The budget is spent: lastcall gives up with this message. */
  gaveUp(message: string): void;
  /** Starts Envoy again. */
  start(signal: AbortSignal): Promise<unknown>;
}

/**
 * Restarts Envoy after crashes, with backoff, until the budget is spent.
 *
 * @example
 * ```ts
 * const crashes = new CrashRestarts({ budget: 10, log, state, closing, due, gaveUp, start });
 * crashes.crashed("code 1", 1200); // restart_scheduled, then due() after 200 ms
 * ```
 */
export class CrashRestarts {
  readonly #deps: CrashRestartDeps;
  readonly #budget: RestartBudget;
  #attempt = 0;

  constructor(deps: CrashRestartDeps) {
    this.#deps = deps;
    this.#budget = new RestartBudget(deps.budget);
  }

  /** The desired config changed: the budget is whole again. */
  refill(): void {
    this.#budget.refill();
  }

  /** Spends the budget on a failed run of `ranMs` and schedules the next start, or gives up. */
  crashed(lastExit: string, ranMs: number): void {
    const { log, state } = this.#deps;
    const attempt = this.#budget.spend(ranMs);
    if (attempt === undefined) {
      state.phase = "stopped";
      const message =
        `Envoy kept exiting (last: ${lastExit}); restart budget of ${this.#budget.limit} spent`;
      log("gave_up", { restarts: this.#budget.spent, last_exit: lastExit, message });
      this.#deps.gaveUp(message);
      return;
    }
    this.#attempt = attempt;
    const delayMs = restartDelay(attempt);
    state.phase = "restarting";
    log("restart_scheduled", { attempt, delay_ms: delayMs, last_exit: lastExit });
    delay(delayMs, this.#deps.closing).then(() => this.#deps.due(), () => {});
  }

  /** Starts Envoy again after a crash; a start that fails counts as one more crash. */
  async restart(signal: AbortSignal): Promise<void> {
    this.#deps.state.restarts++;
    try {
      await this.#deps.start(signal);
    } catch (error) {
      if (signal.aborted) return;
      this.#deps.log("restart_failed", {
        attempt: this.#attempt,
        error: (error as Error).message,
        details: (error as StartError).details ?? [],
      });
      this.crashed((error as Error).message, 0);
    }
  }
}
