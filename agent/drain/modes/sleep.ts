// `--drain-mode sleep` (Istio's terminationDrainDuration): a fixed wait.
import { delay } from "../../lib/async.ts";
import type { DrainWait } from "./context.ts";

/** Istio's `terminationDrainDuration`: sleep a fixed time whatever is in flight. */
export const waitSleep: DrainWait = async function waitSleep(context, signal) {
  await delay(context.terminationDrainMs, signal);
  return "sleep_done";
};
