// `--drain-mode inflight`: the filter's count reaches a pulled zero in every epoch.
import { pollUntil } from "../../lib/async.ts";
import type { DrainWait } from "./context.ts";
import { waitRequests } from "./requests.ts";

/**
 * The filter's pushed count reaches a probe-confirmed zero in every live Envoy. A filter that
 * never reported (not inserted, failed to load) makes this fall back to `requests`, and says so.
 * Listeners the filter is not in (LDS, say) are counted by Envoy's stats as well.
 */
export const waitInflight: DrainWait = async function waitInflight(context, signal) {
  const instances = context.instances();
  const unheard = () => instances.filter((id) => context.tracker.status(id) === "never");
  // An Envoy that started a moment ago may not have sent its first heartbeat yet.
  const firstReport = AbortSignal.any([
    signal,
    AbortSignal.timeout(Math.ceil(2 * context.heartbeatMs)),
  ]);
  await pollUntil(() => Promise.resolve(unheard().length === 0 ? true : undefined), 20, firstReport)
    .catch(() => {
      signal.throwIfAborted();
    });
  const silent = unheard();
  if (instances.length === 0 || silent.length > 0) {
    context.log("drain_fallback", {
      from: "inflight",
      to: "requests",
      reason: "filter never reported",
      instances: silent,
    });
    const reason = await waitRequests({ ...context, statPrefixes: undefined }, signal);
    return reason === "requests_zero" ? "requests_zero_fallback" : reason;
  }
  await context.tracker.waitForZero(instances, signal);
  if (context.statsCounted.length > 0) await waitRequests(context, signal);
  return "inflight_zero";
};
