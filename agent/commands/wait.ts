import { delay } from "../lib/async.ts";
import { formatDuration } from "../lib/duration.ts";
import { onSignal, signalStatus, STOP_SIGNALS, type StopSignal, writeErr } from "../runtime/process.ts";

/** Options of {@linkcode waitReady}. */
export interface WaitOptions {
  /** `/healthz/ready` of the agent. @default "http://127.0.0.1:15020/healthz/ready" */
  statusUrl: string;
  /** Give up after this long. @default 60000 */
  timeoutMs: number;
  /** Time between probes. @default 100 */
  periodMs?: number;
  /** The command named in the line said when giving up. @default "wait" */
  command?: string;
}

const NO_ANSWER = "no answer yet";

/** Asks the status server once; returns undefined when ready, else why not. */
async function probe(url: string, signal: AbortSignal): Promise<string | undefined> {
  try {
    const response = await fetch(url, { signal: AbortSignal.any([signal, AbortSignal.timeout(1000)]) });
    const body = await response.text();
    if (response.ok) return undefined;
    try {
      return (JSON.parse(body) as { reason?: string }).reason ?? `status ${response.status}`;
    } catch {
      return `status ${response.status}: ${body.trim().slice(0, 200)}`;
    }
  } catch (error) {
    const name = (error as Error).name;
    if (name === "TimeoutError" || name === "AbortError") return `status server at ${url} did not answer`;
    const cause = (error as { cause?: { code?: string } }).cause?.code;
    return `status server unreachable at ${url}${cause ? ` (${cause})` : ""}`;
  }
}

/**
 * `lastcall wait`: exits 0 once the proxy is ready; after the timeout, exits 1 with the last
 * reason seen (not just "timeout"), so a stuck pod says why. SIGTERM, SIGINT or SIGQUIT while
 * waiting ends the wait at once: one line, and 128 + the signal's number.
 *
 * @example
 * ```ts
 * process.exitCode = await waitReady({ statusUrl: "http://127.0.0.1:15020/healthz/ready", timeoutMs: 60_000 });
 * ```
 */
export async function waitReady(options: WaitOptions): Promise<number> {
  const stop = new AbortController();
  let stoppedBy: StopSignal | undefined;
  const offs = STOP_SIGNALS.map((signal) => onSignal(signal, () => {
    stoppedBy ??= signal;
    stop.abort();
  }));
  const timeout = AbortSignal.timeout(options.timeoutMs);
  const deadline = AbortSignal.any([timeout, stop.signal]);
  const command = `lastcall ${options.command ?? "wait"}`;
  let reason = NO_ANSWER;
  try {
    while (!deadline.aborted) {
      const answer = await probe(options.statusUrl, deadline);
      if (answer === undefined && !stop.signal.aborted) return 0;
      // A probe cut short by the deadline still beats saying nothing at all.
      if (answer !== undefined && (!deadline.aborted || reason === NO_ANSWER)) reason = answer;
      await delay(options.periodMs ?? 100, deadline).catch(() => {});
    }
  } finally {
    for (const off of offs) off();
  }
  if (stoppedBy) {
    writeErr(`${command}: stopped by ${stoppedBy} before the proxy was ready (last: ${reason})`);
    return signalStatus(stoppedBy);
  }
  writeErr(`${command}: not ready after ${formatDuration(options.timeoutMs)}: ${reason}`);
  return 1;
}
