// The wait strategy of each `--drain-mode`, run by the drain's wait (drainer.ts, waitDrained).
import type { DrainMode } from "../../options.ts";
import type { DrainWait } from "./context.ts";
import { waitConnections } from "./connections.ts";
import { waitInflight } from "./inflight.ts";
import { waitRequests } from "./requests.ts";
import { waitSleep } from "./sleep.ts";

/** The wait strategy of each `--drain-mode`. */
export const DRAIN_WAITS: Record<DrainMode, DrainWait> = {
  inflight: waitInflight,
  requests: waitRequests,
  connections: waitConnections,
  sleep: waitSleep,
};
