// What every benchmark script shares: where things are, quick or full, progress lines, results.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

/** The project folder (bench scripts run bundled from dist/bench/, two levels down). */
export const ROOT = fileURLToPath(new URL("../..", import.meta.url)).replace(/\/$/, "");
/** Where the Go anchors are built (build/bench.mjs). */
export const ANCHORS = join(ROOT, ".cache/anchors/bin");

/** `--quick`: one round and short loads, to prove the harness end to end. */
export const QUICK = process.argv.includes("--quick") || process.env.LASTCALL_BENCH_QUICK === "1";

/** The Envoy binary (set by build/bench.mjs from build/setup.mjs). */
export function envoyBinary(): string {
  const binary = process.env.ENVOY_BIN;
  if (!binary) {
    throw new Error(
      "Cannot run the benchmark: ENVOY_BIN is not set (run it through npm run bench)",
    );
  }
  return binary;
}

/** One progress line on stderr, prefixed with the script's name. */
export function progress(script: string, line: string): void {
  process.stderr.write(`bench ${script}: ${line}\n`);
}

/** Writes `bench/results/<name>.json` (NaN written as null). */
export function writeResult(name: string, result: Record<string, unknown>): void {
  const dir = join(ROOT, "bench/results");
  mkdirSync(dir, { recursive: true });
  const body = {
    ...result,
    quick: QUICK,
    date: new Date().toISOString(),
    node: process.version,
    cpus: (process.env.BENCH_CPUS ?? "") || undefined,
  };
  writeFileSync(join(dir, `${name}.json`), `${JSON.stringify(body, null, 2)}\n`);
}

/** Resolves after `ms` milliseconds. */
export function sleep(ms: number): Promise<void> {
  return new Promise((done) => setTimeout(done, ms));
}

/** A child process whose output is kept (last 64 KiB) for error messages. */
export interface Child {
  readonly process: ChildProcess;
  readonly pid: number;
  /** Resolves with the exit; `at` is performance.now() when it was seen. */
  readonly exited: Promise<{ code: number | null; signal: string | null; at: number }>;
  output(): string;
  /** Sends a signal if still running. */
  kill(signal?: NodeJS.Signals): void;
}

/** Spawns a command with stdout/stderr captured. */
export function start(
  command: string,
  args: string[],
  options: { env?: Record<string, string>; cwd?: string; onLine?: (line: string) => void } = {},
): Child {
  const child = spawn(command, args, {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, ...options.env },
    cwd: options.cwd,
  });
  let output = "";
  let partial = "";
  const keep = (chunk: string) => {
    output = (output + chunk).slice(-65536);
  };
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
    keep(chunk);
    if (!options.onLine) return;
    const lines = (partial + chunk).split("\n");
    partial = lines.pop()!;
    for (const line of lines) options.onLine(line);
  });
  child.stderr!.setEncoding("utf8").on("data", keep);
  let ended = false;
  const exited = new Promise<{ code: number | null; signal: string | null; at: number }>((done) => {
    child.once("exit", (code, signal) => {
      ended = true;
      done({ code, signal, at: performance.now() });
    });
    child.once("error", (error) => {
      ended = true;
      keep(`spawn error: ${error.message}\n`);
      done({ code: null, signal: null, at: performance.now() });
    });
  });
  return {
    process: child,
    pid: child.pid ?? -1,
    exited,
    output: () => output,
    kill(signal = "SIGTERM") {
      if (!ended) child.kill(signal);
    },
  };
}

/** Polls `check` every `intervalMs` until it returns a value, or throws after `timeoutMs`. */
export async function until<T>(
  check: () => T | undefined | Promise<T | undefined>,
  what: string,
  timeoutMs = 20_000,
  intervalMs = 20,
): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value !== undefined) return value;
    } catch (error) {
      last = error;
    }
    if (performance.now() > deadline) {
      throw new Error(
        `Timed out after ${timeoutMs} ms waiting for ${what}${
          last instanceof Error ? `: ${last.message}` : ""
        }`,
      );
    }
    await sleep(intervalMs);
  }
}

/** GET on 127.0.0.1 with a deadline; resolves with the status and body text. */
export async function get(
  url: string,
  timeoutMs = 5000,
): Promise<{ status: number; body: string }> {
  const response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
  return { status: response.status, body: await response.text() };
}
