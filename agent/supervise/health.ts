// Notices a hung Envoy: its admin is asked once a second; one that has not answered for a few
// seconds is reported (`envoy_unresponsive`) and fails readiness until it answers again.
import type { Epoch } from "./envoys.ts";
import type { EventLog } from "../lib/log.ts";

/** Options of {@linkcode watchHealth}. */
export interface HealthOptions {
  /** Time between two questions to each Envoy. @default 1000 */
  periodMs?: number;
  /** Silence after which an Envoy counts as unresponsive. @default 3000 */
  silentMs?: number;
}

/**
 * Asks every live Envoy's admin in turn until `signal` aborts, setting `Epoch.hung`.
 *
 * @example
 * ```ts
 * watchHealth(() => envoys.all(), log, controller.signal);
 * ```
 */
export function watchHealth(
  live: () => Epoch[],
  log: EventLog,
  signal: AbortSignal,
  options: HealthOptions = {},
): void {
  const periodMs = options.periodMs ?? 1000;
  const silentMs = options.silentMs ?? 3000;
  const lastAnswer = new WeakMap<Epoch, number>();
  const asking = new WeakSet<Epoch>();
  const ask = async (envoy: Epoch) => {
    if (!envoy.admin || envoy.adminHandedOver || !envoy.process.running || asking.has(envoy)) {
      return;
    }
    asking.add(envoy);
    const readiness = await envoy.admin.readiness(periodMs);
    asking.delete(envoy);
    const now = Date.now();
    // Any answer (LIVE or not) shows the admin thread is alive.
    if (readiness.state !== "unreachable") {
      lastAnswer.set(envoy, now);
      if (envoy.hung) {
        envoy.hung = false;
        envoy.silentSince = undefined;
        log("envoy_responsive", { epoch: envoy.info.epoch, pid: envoy.info.pid });
      }
      return;
    }
    const since = lastAnswer.get(envoy) ?? envoy.startedAt;
    if (!envoy.hung && envoy.ready && now - since >= silentMs && envoy.process.running) {
      envoy.hung = true;
      envoy.silentSince = since;
      log("envoy_unresponsive", {
        epoch: envoy.info.epoch,
        pid: envoy.info.pid,
        silent_ms: now - since,
        error: readiness.reason,
      });
    }
  };
  const timer = setInterval(() => {
    for (const envoy of live()) void ask(envoy);
  }, periodMs);
  signal.addEventListener("abort", () => clearInterval(timer), { once: true });
}
