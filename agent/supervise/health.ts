// Notices a hung Envoy: its admin is asked once a second; one that has not answered for a few
// seconds is reported (`envoy_unresponsive`) and fails readiness until it answers again.
import type { LiveEnvoy } from "./envoys.ts";
import type { EventLog } from "../lib/log.ts";

/** Options of {@linkcode watchHealth}. */
export interface HealthOptions {
  /** Time between two questions to each Envoy. @default 1000 */
  periodMs?: number;
  /** Silence after which an Envoy counts as unresponsive. @default 3000 */
  silentMs?: number;
}

/**
 * Asks every live Envoy's admin in turn until `signal` aborts, setting `LiveEnvoy.hung`.
 *
 * @example
 * ```ts
 * watchHealth(() => envoys.all(), log, controller.signal);
 * ```
 */
export function watchHealth(live: () => LiveEnvoy[], log: EventLog, signal: AbortSignal, options: HealthOptions = {}): void {
  const periodMs = options.periodMs ?? 1000;
  const silentMs = options.silentMs ?? 3000;
  const lastAnswer = new WeakMap<LiveEnvoy, number>();
  const asking = new WeakSet<LiveEnvoy>();
  const ask = async (envoy: LiveEnvoy) => {
    if (!envoy.admin || envoy.adminHandedOver || !envoy.process.running || asking.has(envoy)) return;
    asking.add(envoy);
    const readiness = await envoy.admin.readiness(periodMs);
    asking.delete(envoy);
    const now = Date.now();
    // Any answer (LIVE or not) shows the admin thread is alive.
    if (readiness.state !== "unreachable") {
      lastAnswer.set(envoy, now);
      if (envoy.hung) {
        envoy.hung = false;
        log("envoy_responsive", { epoch: envoy.info.epoch, pid: envoy.info.pid });
      }
      return;
    }
    const since = lastAnswer.get(envoy) ?? envoy.startedAt;
    if (!envoy.hung && envoy.ready && now - since >= silentMs && envoy.process.running) {
      envoy.hung = true;
      log("envoy_unresponsive", { epoch: envoy.info.epoch, pid: envoy.info.pid, silent_ms: now - since, error: readiness.reason });
    }
  };
  const timer = setInterval(() => {
    for (const envoy of live()) void ask(envoy);
  }, periodMs);
  signal.addEventListener("abort", () => clearInterval(timer), { once: true });
}
