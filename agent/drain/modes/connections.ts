// `--drain-mode connections` (Istio's EXIT_ON_ZERO_ACTIVE_CONNECTIONS): no connection left.
import { pollUntil } from "../../lib/async.ts";
import { activeConnections, parseStatsJson } from "../../envoy/stats.ts";
import type { DrainWait } from "./context.ts";

/** Istio's EXIT_ON_ZERO_ACTIVE_CONNECTIONS: every 1 s, listeners' `downstream_cx_active` reaches 0. */
export const waitConnections: DrainWait = function waitConnections(context, signal) {
  return pollUntil(
    async (s) => {
      const admin = context.admin();
      if (!admin) return "envoy_gone";
      const active = activeConnections(
        parseStatsJson(await admin.stats("downstream_cx_active$", s)),
      );
      // Istio exits at once when the stat is missing.
      if (active === undefined) return "connections_stat_missing";
      return active === 0 ? "connections_zero" : undefined;
    },
    1000,
    signal,
    (error) => context.log("drain_poll_failed", { mode: "connections", error: String(error) }),
  );
};
