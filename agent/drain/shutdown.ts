// The termination sequence (SIGTERM path 3/3): fail readiness (done by the caller), fail
// Envoy's health check, wait for load balancers, drain listeners, wait by mode within the
// deadline, then stop Envoy with escalation. Every wait ends with an explicit reason.
import { delay } from "../async.ts";
import type { AdminClient } from "../envoy/admin.ts";
import type { EnvoyProcess } from "../envoy/process.ts";
import type { EventLog } from "../log.ts";
import type { DrainMode, DrainScope } from "../options.ts";
import type { ModeContext } from "./modes/context.ts";
import { DRAIN_WAITS } from "./modes/index.ts";

/** The plan of one drain, resolved from the options at the moment of the signal. */
export interface DrainPlan {
  mode: DrainMode;
  scope: DrainScope;
  failHealthcheck: boolean;
  drainDelayMs: number;
  minDrainMs: number;
  /** When the signal (or `/drain`) came, ms since the epoch. */
  startedAt: number;
  /** The latest moment to begin stopping Envoy: signal + grace − stop margin. */
  deadline: number;
}

/** Why waiting ended early, as an abort reason. */
class DrainEnded extends Error {
  override name = "DrainEnded";
  constructor(readonly reason: "deadline" | "stopped_now" | "envoy_exited") {
    super(reason);
  }
}

/** What the drain needs from the agent. */
export interface DrainDeps extends ModeContext {
  /** Aborts when the operator insists (SIGINT twice). */
  stopNow: AbortSignal;
  /** Settles when the current Envoy has exited on its own. */
  envoyGone: Promise<unknown>;
}

/**
 * Runs steps 2–5 of the termination sequence and returns why the wait ended:
 * the mode's reason (`inflight_zero`, `requests_zero`, `connections_zero`, `sleep_done`, …),
 * `deadline`, `stopped_now` or `envoy_exited`.
 *
 * @example
 * ```ts
 * const reason = await drainEnvoy(plan, deps);
 * ```
 */
export async function drainEnvoy(plan: DrainPlan, deps: DrainDeps): Promise<string> {
  const { log } = deps;
  const ended = new AbortController();
  const deadlineTimer = setTimeout(() => ended.abort(new DrainEnded("deadline")), Math.max(0, plan.deadline - Date.now()));
  const onStopNow = () => ended.abort(new DrainEnded("stopped_now"));
  deps.stopNow.addEventListener("abort", onStopNow, { once: true });
  if (deps.stopNow.aborted) onStopNow();
  deps.envoyGone.then(() => ended.abort(new DrainEnded("envoy_exited")), () => {});
  const admin = (): AdminClient => {
    const client = deps.admin();
    if (!client) throw new DrainEnded("envoy_exited");
    return client;
  };
  try {
    if (plan.failHealthcheck) {
      await admin().failHealthcheck();
      log("healthcheck_failed");
    }
    if (plan.drainDelayMs > 0) {
      log("drain_delay", { ms: plan.drainDelayMs });
      await delay(plan.drainDelayMs, ended.signal);
    }
    await admin().drainListeners(plan.scope);
    log("listeners_draining", { scope: plan.scope });
    const reason = await DRAIN_WAITS[plan.mode](deps, ended.signal);
    log("drain_wait_done", { mode: plan.mode, reason, ms: Date.now() - plan.startedAt });
    const minEnd = plan.startedAt + plan.minDrainMs;
    if (Date.now() < minEnd) {
      log("min_drain_wait", { ms: minEnd - Date.now() });
      await delay(minEnd - Date.now(), ended.signal);
    }
    return reason;
  } catch (error) {
    const cause = ended.signal.aborted ? ended.signal.reason : error;
    if (cause instanceof DrainEnded) return cause.reason;
    log("drain_step_failed", { error: String(error) });
    // An admin call failed (Envoy busy or gone): keep serving until the deadline rather than
    // cutting requests, unless Envoy is gone or the operator insists.
    try {
      await new Promise((_, reject) => ended.signal.addEventListener("abort", () => reject(ended.signal.reason), { once: true }));
    } catch (final) {
      return final instanceof DrainEnded ? final.reason : "deadline";
    }
    return "deadline";
  } finally {
    clearTimeout(deadlineTimer);
    deps.stopNow.removeEventListener("abort", onStopNow);
  }
}

/**
 * Stops every live Envoy: the current one by `POST /quitquitquit`, then SIGTERM, then SIGKILL
 * if it lingers; hot-restart parents (whose admin the child took over) by SIGTERM.
 */
export async function stopEnvoys(
  processes: readonly EnvoyProcess[],
  admin: AdminClient | undefined,
  log: EventLog,
  graceMs = 3000,
): Promise<void> {
  const current = processes.at(-1);
  if (current?.running && admin) {
    try {
      await admin.quit();
      log("envoy_quit_requested", { pid: current.pid });
    } catch (error) {
      log("envoy_quit_failed", { pid: current.pid, error: String(error) });
    }
  }
  await Promise.all(processes.map(async (p) => {
    if (!p.running) return;
    const exited = await Promise.race([p.exited, delay(p === current && admin ? graceMs : 0).then(() => undefined)]);
    if (exited) return;
    const exit = await p.stop(graceMs);
    log("envoy_stopped", { pid: p.pid, exit: exit.signal ?? exit.code });
  }));
}
