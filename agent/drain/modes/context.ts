import type { AdminClient } from "../../envoy/admin.ts";
import type { EventLog } from "../../log.ts";
import type { InflightTracker } from "../in-flight.ts";

/** What a drain-wait mode can look at. Every wait ends with a reason, or rejects when aborted. */
export interface ModeContext {
  /** Admin client of the current Envoy. */
  admin(): AdminClient | undefined;
  tracker: InflightTracker;
  /** Instances (Envoy processes) whose filters are expected to report. */
  instances(): string[];
  /** Stat prefixes of the connection managers being drained; undefined means all. */
  statPrefixes?: ReadonlySet<string>;
  log: EventLog;
  /** Filter heartbeat period: a filter is given two of them to report for the first time. */
  heartbeatMs: number;
  /** Sleep length of the `sleep` mode. */
  terminationDrainMs: number;
}

/** A wait strategy: resolves with why the drain may end. */
export type DrainWait = (context: ModeContext, signal: AbortSignal) => Promise<string>;
