// The test cluster's processes (etcd, the Kubernetes components, containerd) as children of the
// test: each one's output goes to a log file in the cluster's folder, and stopping is SIGTERM,
// then SIGKILL after a grace. Whatever is still running when the test process exits is killed.
import { type ChildProcess, spawn } from "node:child_process";
import { closeSync, existsSync, mkdirSync, openSync, readFileSync } from "node:fs";
import { join } from "node:path";

/** One long-running process of the cluster. */
export interface Daemon {
  readonly name: string;
  readonly child: ChildProcess;
  /** Its log file (stdout and stderr). */
  readonly log: string;
  /** Settles when it exits (with what `exit` reported). */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves once it is gone. */
  stop(graceMs?: number): Promise<void>;
  /** The last lines of its log. */
  tail(lines?: number): string;
}

const running = new Set<ChildProcess>();
let exitHookInstalled = false;

/**
 * Starts `command args…` with its output in `<dir>/<name>.log`.
 *
 * @example
 * const etcd = startDaemon("etcd", bin.etcd, ["--data-dir", dataDir], { logDir });
 * await etcd.stop();
 */
export function startDaemon(
  name: string,
  command: string,
  args: string[],
  options: { logDir: string; env?: NodeJS.ProcessEnv },
): Daemon {
  mkdirSync(options.logDir, { recursive: true });
  const log = join(options.logDir, `${name}.log`);
  const fd = openSync(log, "a");
  const child = spawn(command, args, {
    stdio: ["ignore", fd, fd],
    env: options.env ?? process.env,
  });
  closeSync(fd);
  running.add(child);
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.once("exit", () => {
      for (const c of running) c.kill("SIGKILL");
    });
  }
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((done) => {
    child.once("exit", (code, signal) => {
      running.delete(child);
      done({ code, signal });
    });
    child.once("error", () => {
      running.delete(child);
      done({ code: -1, signal: null });
    });
  });
  const tail = (
    lines = 30,
  ) => (existsSync(log)
    ? readFileSync(log, "utf8").trimEnd().split("\n").slice(-lines).join("\n")
    : "");
  return {
    name,
    child,
    log,
    exited,
    tail,
    async stop(graceMs = 5000) {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
      await exited;
      clearTimeout(timer);
    },
  };
}

/**
 * A TCP port free on 127.0.0.1, below the kernel's ephemeral range and in this test worker's
 * own slice (test/support/lastcall.ts): a port the kernel picked (listen on 0) is in the
 * ephemeral range, where any other process's outgoing connection can take it before etcd or
 * the API server binds it (seen in CI: etcd "bind: address already in use").
 *
 * @example
 * const port = await freePort();
 */
export { freePort } from "./lastcall.ts";

/** What a command printed and how it ended. */
export interface CommandResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs a command to its end, `input` on its stdin; never rejects for a non-zero exit.
 *
 * @example
 * const { code, stdout } = await runCommand("ctr", ["version"]);
 */
export function runCommand(
  command: string,
  args: string[],
  options: { input?: string; timeoutMs?: number; env?: NodeJS.ProcessEnv } = {},
): Promise<CommandResult> {
  return new Promise((done) => {
    const child = spawn(command, args, {
      stdio: ["pipe", "pipe", "pipe"],
      env: options.env ?? process.env,
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk) => (stdout += chunk));
    child.stderr.on("data", (chunk) => (stderr += chunk));
    const timer = setTimeout(() => {
      stderr += `\n(killed after ${options.timeoutMs} ms)`;
      child.kill("SIGKILL");
    }, options.timeoutMs ?? 60_000);
    child.once("error", (error) => {
      clearTimeout(timer);
      done({ code: -1, stdout, stderr: `${stderr}Cannot run ${command}: ${error.message}` });
    });
    child.once("close", (code) => {
      clearTimeout(timer);
      done({ code, stdout, stderr });
    });
    child.stdin.on("error", () => {});
    child.stdin.end(options.input ?? "");
  });
}

/** Like {@linkcode runCommand}, but rejects naming the command and its stderr when it fails. */
export async function mustRun(
  command: string,
  args: string[],
  options: { input?: string; timeoutMs?: number; env?: NodeJS.ProcessEnv } = {},
): Promise<string> {
  const result = await runCommand(command, args, options);
  if (result.code !== 0) {
    throw new Error(
      `${command} ${args.join(" ")} failed (exit ${result.code}): ${
        result.stderr.trim() || result.stdout.trim()
      }`,
    );
  }
  return result.stdout;
}
