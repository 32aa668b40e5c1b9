// What a drain-wait mode (`--drain-mode`) looks at, and the shape of one.
import type { AdminClient } from "../../envoy/admin.ts";
import type { EventLog } from "../../lib/log.ts";
import type { InflightTracker } from "../in-flight.ts";

/** What a drain-wait mode can look at. Every wait ends with a reason, or rejects when aborted. */
export interface ModeContext {
  /** Admin client of the Envoy that serves, when it can be asked. */
  admin(): AdminClient | undefined;
  tracker: InflightTracker;
  /** Instances (Envoy processes) whose filters are expected to report. */
  instances(): string[];
  /**
   * Stat prefixes of the connection managers whose requests Envoy's stats must count; undefined
   * means every connection manager (listeners lastcall cannot see, such as LDS ones).
   */
  statPrefixes?: ReadonlySet<string>;
  /** Listeners counted by Envoy's stats rather than by the filter (said once in the log). */
  statsCounted: readonly string[];
  log: EventLog;
  /** Filter heartbeat period: a filter is given two of them to report for the first time. */
  heartbeatMs: number;
  /** Sleep length of the `sleep` mode. */
  terminationDrainMs: number;
}

/** A wait strategy: resolves with why the drain may end. */
export type DrainWait = (context: ModeContext, signal: AbortSignal) => Promise<string>;
