import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { constants } from "node:os";
import { onSignal, writeErr } from "../runtime/process.ts";
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

const FORWARDED = ["SIGTERM", "SIGINT", "SIGHUP"] as const;

/** Exit status of a child the way shells report it: its code, or 128 + signal number. */
export function exitStatus(code: number | null, signal: NodeJS.Signals | null): number {
  if (code !== null) return code;
  const number = signal ? (constants.signals as Record<string, number>)[signal] : undefined;
  return 128 + (number ?? 1);
}

/** Tells the agent what became of the app (`POST /v1/app`); a failure is said, never fatal. */
async function tellAgent(statusUrl: string, body: { state: "running" | "exited"; id: string; pid?: number; status?: number }): Promise<void> {
  const url = new URL("/v1/app", statusUrl);
  try {
    const response = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(2000),
    });
    if (!response.ok) writeErr(`lastcall exec: ${url} answered ${response.status}`);
  } catch (error) {
    writeErr(`lastcall exec: cannot tell the agent at ${url} that the app ${body.state === "running" ? "runs" : "exited"}: ${(error as Error).message}`);
  }
}

/**
 * `lastcall exec -- CMD ARGS...`, for the app container: wait until the proxy is ready, run
 * the app with signals forwarded (telling the agent it runs, so a drain waits for it), and when
 * it exits tell the agent and ask it to quit (the same termination sequence as SIGTERM), then
 * exit with the app's status.
 *
 * @example
 * ```ts
 * process.exitCode = await execApp(["./job.sh"], { statusUrl, timeoutMs: 60_000, quit: true });
 * ```
 */
export async function execApp(command: string[], options: ExecOptions): Promise<number> {
  if (command.length === 0) {
    writeErr("lastcall exec: no command given (usage: lastcall exec [options] -- CMD ARGS...)");
    return 2;
  }
  const ready = await waitReady({ statusUrl: options.statusUrl, timeoutMs: options.timeoutMs });
  if (ready !== 0) return ready;
  const child = spawn(command[0], command.slice(1), { stdio: "inherit" });
  const off = FORWARDED.map((signal) => onSignal(signal, () => child.kill(signal)));
  // The agent keeps Envoy for the app's outbound calls until it hears that the app exited.
  // One id per exec: with two wrapped containers, the agent waits for both.
  const id = randomUUID();
  const told = child.pid === undefined ? Promise.resolve() : tellAgent(options.statusUrl, { state: "running", id, pid: child.pid });
  const status = await new Promise<number>((resolve) => {
    child.once("error", (error) => {
      writeErr(`lastcall exec: cannot run ${command[0]}: ${error.message}`);
      resolve(127);
    });
    child.once("exit", (code, signal) => resolve(exitStatus(code, signal)));
  });
  for (const remove of off) remove();
  await told;
  await tellAgent(options.statusUrl, { state: "exited", id, pid: child.pid, status });
  if (options.quit) {
    const url = new URL("/quitquitquit", options.statusUrl);
    try {
      const response = await fetch(url, { method: "POST", signal: AbortSignal.timeout(5000) });
      if (!response.ok) writeErr(`lastcall exec: ${url} answered ${response.status}`);
    } catch (error) {
      writeErr(`lastcall exec: cannot ask the agent to quit at ${url}: ${(error as Error).message}`);
    }
  }
  return status;
}
