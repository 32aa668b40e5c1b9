// The plan of one drain: what it waits for and until when, resolved once from the options at
// the moment it begins (a signal, `POST /drain`, or a reload's old epochs).
import type { DrainMode, DrainScope } from "../options.ts";

/** The plan of one drain, resolved from the options at the moment of the signal. */
export interface DrainPlan {
  /** What began it: a signal, `POST /drain`, `POST /quitquitquit`. */
  source?: string;
  mode: DrainMode;
  scope: DrainScope;
  failHealthcheck: boolean;
  drainDelayMs: number;
  minDrainMs: number;
  /** When the drain began (the signal, or `/drain`), ms since the epoch; the floor runs from it. */
  startedAt: number;
  /**
   * When the termination signal came, once one did: the grace period runs from it (a drain
   * begun by `POST /drain` gets its deadline from the later signal).
   */
  terminatedAt?: number;
  /** When the grace period ends (the kubelet's SIGKILL), once a termination signal came. */
  graceEndsAt?: number;
  /** The latest moment to begin stopping Envoy: signal + grace − stop margin. */
  deadline: number;
  /** The old epochs a reload's drain is for (absent for the termination's drain). */
  epochs?: number[];
  /** Aborts once every app has gone: the floor no longer holds (nothing is left to forward to). */
  floorCut?: AbortSignal;
}

/** When the drain's floor ends (`--min-drain` from its start), or now if every app has gone. */
export function floorAt(plan: DrainPlan): number {
  return plan.floorCut?.aborted ? 0 : plan.startedAt + plan.minDrainMs;
}
