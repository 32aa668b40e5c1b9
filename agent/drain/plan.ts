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
  /** When the drain began (the signal, or `/drain`), ms since the epoch. */
  startedAt: number;
  /**
   * When the floor runs from, when earlier than `startedAt`: the start of the native sidecar's
   * preStop (`lastcall drain`), as the pod's deletion set it going.
   */
  floorFrom?: number;
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

/** The oldest `asked_at` a `POST /drain` may give: older ones count from this long ago. */
export const ASKED_AT_MAX_AGE_MS = 3000;

/**
 * When a drain's floor runs from, given when its caller started: `askedAt`, at most
 * {@linkcode ASKED_AT_MAX_AGE_MS} before `now`; undefined when it is not earlier than `now`.
 *
 * @example
 * ```ts
 * floorFromAsked(9_000, 10_000); // 9000
 * floorFromAsked(1_000, 10_000); // 7000
 * ```
 */
export function floorFromAsked(askedAt: number | undefined, now: number): number | undefined {
  return askedAt !== undefined && askedAt < now
    ? Math.max(askedAt, now - ASKED_AT_MAX_AGE_MS)
    : undefined;
}

/** What a drain in place (`POST /drain`, SIGUSR2) asks for. */
export interface DrainRequest {
  /** The caller is a native sidecar's preStop (`?sidecar=native`): its SIGTERM means the apps exited. */
  nativeSidecar: boolean;
  /** Who asked, as `drain_start` says it. @default "POST /drain" */
  source?: string;
  /** When the caller started (`?asked_at=`, ms since the epoch): the floor runs from it. */
  askedAt?: number;
}

/**
 * When the drain's floor ends (`--min-drain` from its start, or from `floorFrom`), or now if
 * every app has gone.
 *
 * @example
 * ```ts
 * floorAt({ ...plan, startedAt: 10_000, minDrainMs: 5000 }); // 15000
 * ```
 */
export function floorAt(plan: DrainPlan): number {
  return plan.floorCut?.aborted ? 0 : (plan.floorFrom ?? plan.startedAt) + plan.minDrainMs;
}
