// The termination as one script, from the agent's loop to Envoy's exit: its six steps are
// numbered here and nowhere else. It returns what happened; the agent records it and exits.
import { unlessAborted } from "../lib/async.ts";
import { EXIT } from "../lib/errors.ts";
import type { EventLog } from "../lib/log.ts";
import type { AgentState } from "../state.ts";
import { deliveryReading } from "./delivery-reading.ts";
import type { Drainer } from "./drainer.ts";
import { DrainEnded, freshReading } from "./wait.ts";
import {
  countNow,
  type DiedDraining,
  type DrainedEpochs,
  noteUnaskedExits,
  stopUnready,
} from "./epochs.ts";
import type { AppStopGate } from "./app-stop.ts";
import type { DrainPlan } from "./plan.ts";

/** How the termination went: the `terminated` line, `/v1/state`'s `termination`, `/metrics`, the exit code. */
export interface TerminationOutcome {
  mode: string;
  /** Why the wait ended (`inflight_zero`, `deadline`, …), or why there was none (`envoy_not_ready`, `envoy_not_running`). */
  reason: string;
  drainMs: number;
  inflightAtStop: number;
  bytesUnsentAtStop?: number;
  deliveryUnchecked?: string[];
  /** From the wait's last reading of zero to the stop's order, when the wait ended on that zero. */
  lastZeroToStopMs?: number;
  /** Epochs killed under the drain (the OOM killer, a kill -9). */
  died: DiedDraining[];
  /** 0, or 1 when an epoch died under the drain with requests in flight (or by a signal, or failing). */
  code: number;
}

/** What the termination works with. */
export interface TerminationContext {
  log: EventLog;
  /** The agent's state: its phase becomes `stopping` at step 5. */
  state: Pick<AgentState, "phase">;
  /** The drain: its plan begins, it waits, and it says what its wait read last. */
  drain: Pick<Drainer, "begin" | "wait" | "settled">;
  epochs: DrainedEpochs;
  /** The apps' preStop hooks (`GET /v1/app-stop`): those held are answered once Envoy stopped. */
  appStop?: Pick<AppStopGate, "settled" | "proxyStopped">;
}

/** Options of {@linkcode terminate}. */
export interface TerminateOptions {
  /** Settles once the reload or crash restart the agent aborted has given up. @default settled */
  preempted?: Promise<void>;
  /** Aborts when the operator insists (SIGINT twice): the wait ends at once. */
  stopNow?: AbortSignal;
  /** Begun by the apps' preStop (nothing left for the proxy): the drain's deadline holds. */
  byApps?: boolean;
}

/**
 * Runs the termination to its end: 1. fail readiness, 2. drain listeners, 3. wait by mode,
 * 4. wait for delivery, 5. stop Envoy, 6. say what was cut.
 *
 * @example
 * ```ts
 * const outcome = await terminate({ log, state, drain, epochs }, "SIGTERM", { preempted, stopNow });
 * ```
 */
export async function terminate(
  c: TerminationContext,
  source: string,
  options: TerminateOptions = {},
): Promise<TerminationOutcome> {
  const { log, drain, epochs } = c;
  log("terminate", { source });
  const died = noteUnaskedExits(epochs);
  // 1. Fail readiness: the drain begins, /healthz/ready answers 503 from now on (drainer.ts).
  // 2. Drain listeners: every ready epoch fails its health check, waits --drain-delay, drains.
  const plan = drain.begin(source, options.byApps ? "by apps" : true);
  await options.preempted;
  died.note(); // an epoch the pre-empted task had just started
  const hadEpoch = epochs.running().length > 0;
  await stopUnready(log, epochs, plan);
  let reason = hadEpoch ? "envoy_not_ready" : "envoy_not_running";
  let cut: Cut = { inflightAtStop: 0 };
  if (epochs.running().length > 0) {
    // 3. Wait by mode, 4. then for delivery, until the deadline (wait.ts: waitDrained).
    reason = await drain.wait(plan, options.stopNow);
    // 5. Stop Envoy within what is left of the grace period.
    c.state.phase = "stopping";
    cut = await stopAll(c, plan);
    // A counting mode's wait that ended on its own read a zero right before it returned.
    const counting = plan.mode === "inflight" || plan.mode === "requests";
    if (!counting || DrainEnded.reasons.includes(reason)) delete cut.lastZeroToStopMs;
  }
  // An app's preStop held until Envoy stopped is answered now, from a running lastcall.
  c.appStop?.proxyStopped();
  const answered = c.appStop?.settled() ?? Promise.resolve();
  await (options.stopNow ? unlessAborted(answered, options.stopNow) : answered).catch(() => {});
  // 6. Say what was cut. Epochs killed under the drain took their requests with them.
  const inflightAtStop = cut.inflightAtStop + died.list.reduce((sum, d) => sum + d.inflight, 0);
  if (died.list.length > 0 && reason === "inflight_zero") reason = "envoy_exited";
  if (died.list.length > 0) delete cut.lastZeroToStopMs; // not a drain that ended on zero
  const outcome = {
    mode: plan.mode,
    reason,
    drainMs: Date.now() - plan.startedAt,
    ...cut,
    inflightAtStop,
    died: died.list,
  };
  log("terminated", {
    mode: outcome.mode,
    reason,
    drain_ms: outcome.drainMs,
    inflight_at_stop: inflightAtStop,
    ...(cut.bytesUnsentAtStop !== undefined ? { bytes_unsent_at_stop: cut.bytesUnsentAtStop } : {}),
    ...(cut.deliveryUnchecked ? { delivery_unchecked: cut.deliveryUnchecked } : {}),
    ...(cut.lastZeroToStopMs !== undefined ? { last_zero_to_stop_ms: cut.lastZeroToStopMs } : {}),
    ...(died.list.length > 0 ? { envoy_exits: died.list.map((d) => d.exit) } : {}),
  });
  // Whoever reads the exit status learns that it was not a clean termination.
  const clean = died.list.every((d) => d.inflight === 0 && d.exit === "code 0");
  return { ...outcome, code: clean ? EXIT.ok : EXIT.envoyGaveUp };
}

type Cut = Pick<
  TerminationOutcome,
  "inflightAtStop" | "bytesUnsentAtStop" | "deliveryUnchecked" | "lastZeroToStopMs"
>;

/** Step 5: reads what is in flight and undelivered (`inflight_at_stop`), then stops every epoch. */
async function stopAll({ drain, epochs }: TerminationContext, plan: DrainPlan): Promise<Cut> {
  // Everything from here fits in what is left of the grace period (less a little for exiting).
  const graceEnd = (plan.graceEndsAt ?? plan.deadline) - 300;
  // A wait that ended on a zero just now has read both already: no second read in the tail.
  const measureMs = Math.floor(Math.max(50, Math.min(500, (graceEnd - Date.now()) / 4)));
  const fresh = freshReading(drain.settled);
  const [inflight, left] = fresh
    ? [fresh.inflight]
    : await Promise.all([countNow(epochs, measureMs), epochs.undelivered()]);
  const targets = epochs.running();
  const gone = targets.length === 0 ? "Envoy exited before its buffers were read" : undefined;
  const reading = fresh ?? { inflight, ...deliveryReading(left, gone) };
  const budget = () => Math.max(200, graceEnd - Date.now());
  const zero = drain.settled?.inflight === 0 ? drain.settled.at : undefined;
  const lastZeroToStopMs = zero === undefined ? undefined : Date.now() - zero;
  // The newest epoch of each generation first: its shutdown ends its hot-restart parent (a parent
  // stopped first makes the child abort as it shuts down); whatever still runs is stopped next.
  const newest = targets.filter((l) =>
    !targets.some((o) => o.info.generation === l.info.generation && o.info.epoch > l.info.epoch)
  );
  for (const l of targets) l.stopAsked = true; // a parent its child ends did not die under the drain
  await epochs.stop(newest, budget() / 2);
  await epochs.stop(targets.filter((l) => l.process.running), budget());
  return {
    inflightAtStop: reading.inflight,
    bytesUnsentAtStop: reading.bytesUnsent,
    ...(reading.unchecked ? { deliveryUnchecked: reading.unchecked } : {}),
    ...(lastZeroToStopMs !== undefined ? { lastZeroToStopMs } : {}),
  };
}
