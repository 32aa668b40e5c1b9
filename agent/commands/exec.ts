import { type ChildProcess, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { APP_RENEW_MS } from "../supervise/app-watch.ts";
import { delay } from "../lib/async.ts";
import { HANDLED_SIGNALS, onSignal, signalStatus, writeErr } from "../runtime/process.ts";
import { waitReady } from "./wait.ts";

/** Options of {@linkcode execApp}. */
export interface ExecOptions {
  /** The agent's readiness URL. @default "http://127.0.0.1:15020/healthz/ready" */
  statusUrl: string;
  /** How long to wait for readiness before giving up (the app is not started). @default 60000 */
  timeoutMs: number;
  /** Ask the agent to quit when the app exits, so Jobs complete. @default true */
  quit: boolean;
}

/** Exit status of a child the way shells report it: its code, or 128 + signal number. */
export function exitStatus(code: number | null, signal: NodeJS.Signals | null): number {
  if (code !== null) return code;
  return signal ? signalStatus(signal) : 129;
}

/** What `lastcall exec` says of its app (`POST /v1/app`). */
interface AppNews {
  state: "running" | "exited";
  id: string;
  pid?: number;
  status?: number;
}

/** Tells the agent what became of the app; resolves with what went wrong, if anything. */
async function tellAgent(statusUrl: string, body: AppNews): Promise<string | undefined> {
  const url = new URL("/v1/app", statusUrl);
  try {
    const response = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(2000),
    });
    await response.text().catch(() => "");
    return response.ok ? undefined : `lastcall exec: ${url} answered ${response.status}`;
  } catch (error) {
    return `lastcall exec: cannot tell the agent at ${url} that the app ${
      body.state === "running" ? "runs" : "exited"
    }: ${(error as Error).message}`;
  }
}

/**
 * Says every {@linkcode APP_RENEW_MS} that the app still runs (its lease: the agent forgets an
 * app it has not heard of for a while); a failure is said once, until a renewal gets through.
 *
 * @returns Stops renewing; resolves once no renewal is on its way (so none lands after "exited")
 */
function renewLease(statusUrl: string, news: AppNews): () => Promise<void> {
  const stop = new AbortController();
  const renewing = (async () => {
    let failing = false;
    while (await delay(APP_RENEW_MS, stop.signal).then(() => true, () => false)) {
      const problem = await tellAgent(statusUrl, news);
      if (problem && !failing) writeErr(problem);
      failing = problem !== undefined;
    }
  })();
  return () => {
    stop.abort();
    return renewing;
  };
}

/**
 * `lastcall exec -- CMD ARGS...`, for the app container: wait until the proxy is ready, run
 * the app with signals forwarded (telling the agent it runs, and again every few seconds, so a
 * drain waits for it), and when it exits tell the agent and ask it to quit (the same
 * termination sequence as SIGTERM), then exit with the app's status.
 *
 * Signals: before the app starts, SIGTERM, SIGINT and SIGQUIT end the wait at once (the app is
 * never started; 128 + the signal's number); once it runs, all six of
 * {@linkcode HANDLED_SIGNALS} go to the app, and nothing else.
 *
 * @example
 * ```ts
 * process.exitCode = await execApp(["./job.sh"], { statusUrl, timeoutMs: 60_000, quit: true });
 * ```
 */
export async function execApp(command: string[], options: ExecOptions): Promise<number> {
  if (command.length === 0 || command[0] === "") {
    writeErr("lastcall exec: no command given (usage: lastcall exec [options] -- CMD ARGS...)");
    return 2;
  }
  const ready = await waitReady({
    statusUrl: options.statusUrl,
    timeoutMs: options.timeoutMs,
    command: "exec",
  });
  if (ready !== 0) return ready;
  const child = spawn(command[0], command.slice(1), { stdio: "inherit" });
  // From the same tick as the spawn (no signal can come between), until exec returns.
  const off = HANDLED_SIGNALS.map((signal) =>
    onSignal(signal, () => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    })
  );
  try {
    return await runApp(command, child, options);
  } finally {
    for (const remove of off) remove();
  }
}

/** Tells the agent the app runs (and keeps telling it), waits for its exit, tells that too, asks the agent to quit. */
async function runApp(
  command: string[],
  child: ChildProcess,
  options: ExecOptions,
): Promise<number> {
  // The agent keeps Envoy for the app's outbound calls until it hears that the app exited.
  // One id per exec: with two wrapped containers, the agent waits for both.
  const id = randomUUID();
  const running: AppNews = { state: "running", id, pid: child.pid };
  const told = child.pid === undefined
    ? Promise.resolve()
    : tellAgent(options.statusUrl, running).then((problem) => problem && writeErr(problem));
  const stopRenewing = child.pid === undefined
    ? async () => {}
    : renewLease(options.statusUrl, running);
  const status = await new Promise<number>((resolve) => {
    child.once("error", (error: NodeJS.ErrnoException) => {
      writeErr(`lastcall exec: cannot run ${command[0]}: ${error.message}`);
      // As shells: 127 not found, 126 found but not runnable (a folder, no x bit).
      resolve(error.code === "ENOENT" ? 127 : 126);
    });
    child.once("exit", (code, signal) => resolve(exitStatus(code, signal)));
  });
  await Promise.all([told, stopRenewing()]);
  const problem = await tellAgent(options.statusUrl, {
    state: "exited",
    id,
    pid: child.pid,
    status,
  });
  if (problem) writeErr(problem);
  if (options.quit) {
    const url = new URL("/quitquitquit", options.statusUrl);
    try {
      const response = await fetch(url, { method: "POST", signal: AbortSignal.timeout(5000) });
      if (!response.ok) writeErr(`lastcall exec: ${url} answered ${response.status}`);
    } catch (error) {
      writeErr(
        `lastcall exec: cannot ask the agent to quit at ${url}: ${(error as Error).message}`,
      );
    }
  }
  return status;
}
