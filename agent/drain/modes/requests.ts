// `--drain-mode requests`: Envoy's `downstream_rq_active` of the drained listeners reaches 0.
import { pollUntil } from "../../lib/async.ts";
import { activeRequests, parseStatsJson } from "../../envoy/stats.ts";
import type { DrainWait } from "./context.ts";

/** Poll period of Envoy's stats: fast enough to exit soon, cheap for Envoy's admin thread. */
export const REQUESTS_POLL_MS = 200;

/**
 * Polls `downstream_rq_active` of the drained connection managers until it is 0. With no admin
 * to ask (a hot-restart parent whose admin went to a stopped child), the filter's count is used.
 */
export const waitRequests: DrainWait = function waitRequests(context, signal) {
  return pollUntil(
    async (s) => {
      const admin = context.admin();
      if (!admin) {
        await context.tracker.waitForZero(context.instances(), s);
        return "requests_zero";
      }
      const active = activeRequests(
        parseStatsJson(await admin.stats("downstream_rq_active$", s)),
        context.statPrefixes,
      );
      return active === 0 ? "requests_zero" : undefined;
    },
    REQUESTS_POLL_MS,
    signal,
    (error) => context.log("drain_poll_failed", { mode: "requests", error: String(error) }),
  );
};
