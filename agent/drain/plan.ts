// The plan of one drain: what it waits for and until when, resolved once from the options at
// the moment it begins (a signal, `POST /drain`, or a reload's old epochs).
import { delay } from "../lib/async.ts";
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
 * How long before a floor ends the filters are told to push, for a filter heartbeat of
 * `heartbeatMs`: the 10 % of it a VM's report is not held (a VM then learns at its next
 * heartbeat), and a round trip. 250 ms at the default 1 s.
 */
export function pushLeadMs(heartbeatMs: number): number {
  return heartbeatMs / 10 + 150;
}

/**
 * When the drain's filters are to push each move to and from zero: {@linkcode pushLeadMs}
 * before the floor ends (or the deadline, if sooner). Until then no zero can end the drain, so a
 * push would only cost Envoy and lastcall a report each (two per request on a quiet pod).
 *
 * @example
 * ```ts
 * pushesFrom({ ...plan, startedAt: 10_000, minDrainMs: 5000, deadline: 38_000 }, 1000); // 14750
 * ```
 */
export function pushesFrom(plan: DrainPlan, heartbeatMs: number): number {
  return Math.min(floorAt(plan), plan.deadline) - pushLeadMs(heartbeatMs);
}

/**
 * Resolves once the drain's filters are to push ({@linkcode pushesFrom}), or at once when every
 * app has gone; rejects when `signal` aborts first. A later termination signal may bring the
 * deadline forward: the plan is read again at least once a second.
 *
 * @example
 * ```ts
 * await untilPushes(plan, 1000, closing); // then answer the filters' held reports
 * ```
 */
export async function untilPushes(
  plan: DrainPlan,
  heartbeatMs: number,
  signal: AbortSignal,
): Promise<void> {
  const cut = plan.floorCut ? AbortSignal.any([signal, plan.floorCut]) : signal;
  while (Date.now() < pushesFrom(plan, heartbeatMs)) {
    await delay(Math.min(pushesFrom(plan, heartbeatMs) - Date.now(), 1000), cut).catch((error) => {
      if (signal.aborted) throw error;
    });
  }
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
