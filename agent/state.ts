/** Where the agent is in its life. */
export type Phase = "starting" | "running" | "restarting" | "draining" | "stopping" | "stopped";

/** One live Envoy process. */
export interface EpochInfo {
  epoch: number;
  pid: number;
  /** Id given to this process's filter, echoed in its reports. */
  instance: string;
  /** Admin base URL, once known. */
  adminUrl?: string;
}

/** How the termination went; also the last log line and `/metrics`. */
export interface TerminationSummary {
  mode: string;
  reason: string;
  drainMs: number;
  inflightAtStop: number;
}

/** All mutable agent state, owned by the agent; everyone else reads snapshots. */
export interface AgentState {
  phase: Phase;
  /** The current (newest) Envoy, if running. */
  current?: EpochInfo;
  /** Every live Envoy, hot-restart parents included. */
  epochs: EpochInfo[];
  /** Crash restarts since start. */
  restarts: number;
  hotRestarts: number;
  reloadsRejected: number;
  lastExitReason?: string;
  /** Set once the termination or `/drain` sequence began. */
  drainStartedAt?: number;
  termination?: TerminationSummary;
}

/** A fresh state for an agent that is starting. */
export function initialState(): AgentState {
  return { phase: "starting", epochs: [], restarts: 0, hotRestarts: 0, reloadsRejected: 0 };
}
