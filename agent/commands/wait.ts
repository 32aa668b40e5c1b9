import { delay } from "../lib/async.ts";
import { formatDuration } from "../lib/duration.ts";
import {
  onSignal,
  signalStatus,
  STOP_SIGNALS,
  type StopSignal,
  writeErr,
} from "../runtime/process.ts";
import { excerpt } from "./status.ts";

/** Options of {@linkcode waitReady}. */
export interface WaitOptions {
  /**
   * The agent's status server, as `statusUrlArg` (options.ts) reads `--status-url`: its origin;
   * `/healthz/ready` there is asked (a URL with a path means its origin). @default "http://127.0.0.1:15020"
   */
  statusUrl: string;
  /** Give up after this long. @default 60000 */
  timeoutMs: number;
  /** Time between probes. @default 100 */
  periodMs?: number;
  /** The command named in the line said when giving up. @default "wait" */
  command?: string;
}

const NO_ANSWER = "no answer yet";

/** lastcall's reason in a not-ready answer (`{"ready":false,"reason":"…"}`), if it is one. */
function reasonOf(body: string): string | undefined {
  try {
    const reason = (JSON.parse(body) as { reason?: unknown } | null)?.reason;
    return typeof reason === "string" ? reason : undefined;
  } catch {
    return undefined;
  }
}

/** Asks the status server once; returns undefined when ready, else why not, naming `url`. */
async function probe(url: string, signal: AbortSignal): Promise<string | undefined> {
  try {
    const response = await fetch(url, {
      signal: AbortSignal.any([signal, AbortSignal.timeout(1000)]),
    });
    const body = await response.text();
    if (response.ok) return undefined;
    const reason = reasonOf(body);
    return reason === undefined
      ? `${url} answered ${response.status}: ${excerpt(body)}`
      : `${url} says ${reason}`;
  } catch (error) {
    const name = (error as Error).name;
    if (name === "TimeoutError" || name === "AbortError") {
      return `status server at ${url} did not answer`;
    }
    const cause = (error as { cause?: { code?: string } }).cause?.code;
    return `status server unreachable at ${url}${cause ? ` (${cause})` : ""}`;
  }
}

/**
 * `lastcall wait`: exits 0 once the proxy is ready; after the timeout, exits 1 with the last
 * reason seen (not just "timeout"), naming the URL asked, so a stuck pod says why and where.
 * SIGTERM, SIGINT or SIGQUIT while waiting ends the wait at once: one line, and 128 + the
 * signal's number.
 *
 * @example
 * ```ts
 * process.exitCode = await waitReady({ statusUrl: "http://127.0.0.1:15020", timeoutMs: 60_000 });
 * ```
 */
export async function waitReady(options: WaitOptions): Promise<number> {
  const stop = new AbortController();
  let stoppedBy: StopSignal | undefined;
  const offs = STOP_SIGNALS.map((signal) =>
    onSignal(signal, () => {
      stoppedBy ??= signal;
      stop.abort();
    })
  );
  const timeout = AbortSignal.timeout(options.timeoutMs);
  const deadline = AbortSignal.any([timeout, stop.signal]);
  const command = `lastcall ${options.command ?? "wait"}`;
  const url = String(new URL("/healthz/ready", options.statusUrl));
  let reason = `${NO_ANSWER} from ${url}`;
  let heard = false;
  try {
    while (!deadline.aborted) {
      const answer = await probe(url, deadline);
      if (answer === undefined && !stop.signal.aborted) return 0;
      // A probe cut short by the deadline still beats saying nothing at all.
      if (answer !== undefined && (!deadline.aborted || !heard)) {
        reason = answer;
        heard = true;
      }
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
