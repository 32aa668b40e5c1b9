// The termination (SIGTERM path 3/4): from the signal to the one `terminated` line. Pre-empt
// whatever the agent was doing, stop the Envoys that never served, wait by mode until nothing is
// in flight and nothing is left to deliver (or the deadline), stop Envoy, and say what was cut.
import { EXIT } from "../lib/errors.ts";
import type { EventLog } from "../lib/log.ts";
import type { RunOptions } from "../options.ts";
import type { AgentState } from "../state.ts";
import type { Envoys } from "../supervise/envoys.ts";
import type { DrainMetrics } from "./drain-metrics.ts";
import type { Drainer } from "./drainer.ts";
import { DrainEnded } from "./shutdown.ts";

/** An Envoy that exited by itself during the termination: what it had in flight, how it ended. */
export interface DiedDraining {
  inflight: number;
  exit: string;
}

/** What the termination needs from the agent. */
export interface TerminateContext {
  options: RunOptions;
  log: EventLog;
  state: AgentState;
  envoys: Envoys;
  drainer: Drainer;
  /** Aborts a reload or crash restart in progress and waits until it gave up. */
  preempt(): Promise<void>;
  /** Copies the live Envoys into the state (for `/v1/state`). */
  syncState(): void;
  /** Envoys killed under the drain so far (filled by the agent as they exit). */
  died: readonly DiedDraining[];
  /** How drains end, for `/metrics`. */
  drains?: DrainMetrics;
}

/**
 * Runs the termination sequence to its end and returns lastcall's exit code: 0, or 1 when an
 * Envoy died under the drain with requests in flight (or by a signal, or failing).
 *
 * @example
 * ```ts
 * const code = await terminate(context, "SIGTERM");
 * ```
 */
export async function terminate(c: TerminateContext, source: string): Promise<number> {
  c.log("terminate", { source });
  const plan = c.drainer.start(source, true);
  const metered = c.drains?.started("termination", () => plan.deadline);
  await c.preempt();
  const hadEnvoy = c.envoys.all().some((l) => l.process.running);
  await c.drainer.stopUnready();
  c.syncState();
  let reason = hadEnvoy ? "envoy_not_ready" : "envoy_not_running";
  let inflightAtStop = 0;
  let bytesUnsentAtStop: number | undefined;
  let deliveryUnchecked: string[] | undefined;
  let lastZeroToStopMs: number | undefined;
  if (c.envoys.all().some((l) => l.process.running)) {
    reason = await c.drainer.waitDrained(plan);
    c.state.phase = "stopping";
    const stopped = await c.drainer.stop(plan);
    ({ inflightAtStop, bytesUnsentAtStop, deliveryUnchecked } = stopped);
    // A counting mode's wait that ended on its own read a zero right before it returned.
    const counting = plan.mode === "inflight" || plan.mode === "requests";
    if (counting && !DrainEnded.reasons.includes(reason)) lastZeroToStopMs = stopped.lastZeroToStopMs;
  }
  // Envoys killed under the drain took their requests with them: the last count known of them.
  const died = c.died;
  inflightAtStop += died.reduce((sum, d) => sum + d.inflight, 0);
  if (died.length > 0 && reason === "inflight_zero") reason = "envoy_exited";
  if (died.length > 0) lastZeroToStopMs = undefined; // not a drain that ended on zero
  const summary = { mode: c.options.drainMode, reason, drainMs: Date.now() - plan.startedAt, inflightAtStop };
  metered?.ended({
    reason,
    drainMs: summary.drainMs,
    inflightAtStop,
    ...(bytesUnsentAtStop !== undefined ? { bytesUnsent: bytesUnsentAtStop } : {}),
    ...(lastZeroToStopMs !== undefined ? { lastZeroToStopMs } : {}),
  });
  c.state.termination = summary;
  c.state.phase = "stopped";
  c.log("terminated", {
    mode: summary.mode,
    reason,
    drain_ms: summary.drainMs,
    inflight_at_stop: inflightAtStop,
    ...(bytesUnsentAtStop !== undefined ? { bytes_unsent_at_stop: bytesUnsentAtStop } : {}),
    ...(deliveryUnchecked ? { delivery_unchecked: deliveryUnchecked } : {}),
    ...(lastZeroToStopMs !== undefined ? { last_zero_to_stop_ms: lastZeroToStopMs } : {}),
    ...(died.length > 0 ? { envoy_exits: died.map((d) => d.exit) } : {}),
  });
  // Whoever reads the exit status learns that it was not a clean termination.
  const clean = died.every((d) => d.inflight === 0 && d.exit === "code 0");
  return clean ? EXIT.ok : EXIT.envoyGaveUp;
}
