/** Where the agent is in its life. */
export type Phase = "starting" | "running" | "restarting" | "draining" | "stopping" | "stopped";

/** What `/v1/state` shows of one epoch (one Envoy process; see supervise/envoys.ts). */
export interface EpochInfo {
  epoch: number;
  pid: number;
  /** Id given to this process's filter, echoed in its reports. */
  instance: string;
  /** Cold starts since lastcall started: a generation is epoch 0 and its hot restarts. */
  generation: number;
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
  /** The newest Envoy, if any runs. */
  current?: EpochInfo;
  /** The Envoy that serves traffic: the newest that became ready (a hot-restart parent until its child is). */
  serving?: EpochInfo;
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
