// A reload (SIGHUP, a watched file): the next epoch by a hot restart, or a cold restart after
// the old Envoy finished. The new config is validated first; a bad one is rejected and the
// running Envoy keeps serving. A terminate aborts it at once (`signal`).
import { unlessAborted } from "../lib/async.ts";
import type { StartError } from "../lib/errors.ts";
import type { EventLog } from "../lib/log.ts";
import type { RunOptions } from "../options.ts";
import type { AgentState } from "../state.ts";
import type { Envoys, Epoch } from "./envoys.ts";

/** What a reload needs from the agent. */
export interface ReloadContext {
  options: RunOptions;
  log: EventLog;
  state: AgentState;
  envoys: Envoys;
  /** Whether a drain (termination or `POST /drain`) began: a reload is skipped then. */
  draining(): boolean;
  /** Lets old Envoys finish what they serve; stops a cold reload's one (see drain/old-epochs.ts). */
  finishOld(old: Epoch[], kind: "cold", signal: AbortSignal): Promise<string>;
  /** Resolves once every old epoch being finished has finished. */
  oldFinished(): Promise<void>;
  /** Starts the next Envoy: a hot-restart child, or a fresh generation. */
  start(hot: boolean, signal: AbortSignal): Promise<unknown>;
  /** Validates the new config with Envoy; rejects with Envoy's own lines when it is bad. */
  validate(signal: AbortSignal): Promise<void>;
}

/**
 * Reloads Envoy for `reason`; resolves when the new Envoy started (or the reload was rejected,
 * logged as `reload_rejected`, or skipped).
 *
 * @example
 * ```ts
 * await reload(context, "SIGHUP", signal);
 * ```
 */
export async function reload(c: ReloadContext, reason: string, signal: AbortSignal): Promise<void> {
  const newest = c.envoys.newest();
  if (!newest || c.draining()) {
    c.log("reload_skipped", { reason, why: newest ? "draining" : "Envoy not running" });
    return;
  }
  c.log("reload", { reason });
  // Envoy refuses a hot restart while the previous epoch is still initializing.
  if (!newest.ready) {
    c.log("reload_waiting", { reason, why: `epoch ${newest.info.epoch} is not ready yet` });
  }
  await unlessAborted(newest.whenReady, signal);
  const serving = newest.info.epoch;
  try {
    if (c.options.hotRestart) {
      // Envoy ends a grandparent as the next child starts: the last reload's parent finishes first.
      const finishing = c.envoys.all().filter((l) => l !== newest && l.drained === undefined).map((
        l,
      ) => l.info.epoch);
      if (finishing.length > 0) {
        c.log("reload_waiting", {
          reason,
          why: `epochs ${finishing.join(", ")} still finishing their requests`,
        });
      }
      await unlessAborted(c.oldFinished(), signal);
      await c.start(true, signal);
      c.state.hotRestarts++;
      return;
    }
    // Cold: validate the new config first (the old Envoy keeps serving if it is bad), then let
    // the old Envoy finish (a terminate meanwhile takes over), stop it, and start the new one.
    await c.validate(signal);
    if (await c.finishOld(c.envoys.all(), "cold", signal) === "aborted") signal.throwIfAborted();
    await c.start(false, signal);
  } catch (error) {
    if (signal.aborted) return;
    c.state.reloadsRejected++;
    c.log("reload_rejected", {
      reason,
      error: (error as Error).message,
      details: (error as StartError).details ?? [],
      serving_epoch: serving,
    });
  }
}
