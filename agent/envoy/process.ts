// One Envoy process: spawned with its output passed through and a watchdog against orphaning,
// and stopped with escalation (`stopEnvoy`, the one way lastcall stops an Envoy).
import { type ChildProcess, spawn } from "node:child_process";
import { delay } from "../lib/async.ts";
import type { EventLog } from "../lib/log.ts";
import { writeErrChunk } from "../runtime/process.ts";

/** How many of Envoy's last output lines are kept, for refusals that quote Envoy. */
const KEPT_LINES = 40;

/** How an Envoy process ended. */
export interface EnvoyExit {
  /** Exit code, or null when a signal ended it. */
  code: number | null;
  /** Signal that ended it, if any. */
  signal: string | null;
}

/** A running Envoy: its pid, a promise of its end, and a way to signal it. */
export interface EnvoyProcess {
  /** Process id. */
  readonly pid: number;
  /** Settles once, when the process has ended. */
  readonly exited: Promise<EnvoyExit>;
  /** Whether the process has ended. */
  readonly running: boolean;
  /** Sends a signal if the process still runs. */
  signal(signal: NodeJS.Signals): void;
  /** Envoy's last lines on standard error (they are also passed through). */
  recentOutput(): string[];
  /** Passes on the standard error held back so far (`holdOutput`) and from now on. */
  releaseOutput(): void;
}

/** Options of {@linkcode spawnEnvoy}. */
export interface SpawnOptions {
  /** Hold Envoy's standard error back until `releaseOutput()` (never passed on without it). @default false */
  holdOutput?: boolean;
}

/**
 * Finds Envoy's own line about an address it could not bind (port taken, address not local),
 * e.g. `cannot bind '127.0.0.1:15000': Address already in use`.
 */
export function bindFailure(
  lines: readonly string[],
): { address: string; line: string } | undefined {
  // Envoy 1.40 logs `[…][critical][main] … error `cannot bind '…': …` initializing config …`,
  // then prints the bare message as its last line: quote that one.
  const plain = lines.find((l) => l.startsWith("cannot bind '"));
  const line = plain ?? lines.find((l) => l.includes("cannot bind '"));
  const address = line ? /cannot bind '([^']+)'/.exec(line)?.[1] : undefined;
  return line && address ? { address, line: line.trim() } : undefined;
}

/** Renders an exit for logs and messages: `code 1`, `signal SIGKILL`. */
export function describeExit(exit: EnvoyExit): string {
  return exit.signal ? `signal ${exit.signal}` : `code ${exit.code}`;
}

// If lastcall itself is killed (SIGKILL, OOM), nothing would stop its Envoy: Envoy sets a
// parent-death signal only when hot restart is enabled, and PR_SET_PDEATHSIG follows the
// spawning *thread*, not the process. A tiny shell holds the read end of a pipe whose write end
// only lastcall has; the kernel closes it when lastcall dies, `read` returns, Envoy is stopped:
// SIGTERM, then SIGKILL after 5 s if it is still there. "Still there" is the same pid with the
// same start time (/proc/PID/stat, field 22): a pid the kernel gave to another process after
// Envoy exited is never signalled, and a zombie counts as gone.
const WATCHDOG = [
  'started() { s=$(cat "/proc/$1/stat" 2>/dev/null) || return 0; set -- ${s##*) }; [ "$1" = Z ] || echo "${20}"; }',
  'p=$1; t=$(started "$p")',
  "read -r _ || true",
  '[ "$(started "$p")" = "$t" ] || exit 0',
  'kill -TERM "$p" 2>/dev/null',
  'i=0; while [ $i -lt 50 ]; do [ "$(started "$p")" = "$t" ] || exit 0; sleep 0.1; i=$((i + 1)); done',
  '[ "$(started "$p")" = "$t" ] && kill -KILL "$p" 2>/dev/null',
].join("\n");

function startWatchdog(pid: number): ChildProcess | undefined {
  try {
    const watchdog = spawn("/bin/sh", ["-c", WATCHDOG, "lastcall-watchdog", String(pid)], {
      stdio: ["pipe", "ignore", "ignore"],
      detached: true,
    });
    watchdog.on("error", () => {});
    watchdog.stdin?.on("error", () => {});
    watchdog.unref();
    (watchdog.stdin as unknown as { unref?: () => void })?.unref?.();
    return watchdog;
  } catch {
    return undefined;
  }
}

/**
 * Starts Envoy with its output passed through, in its own process group so a terminal's Ctrl-C
 * reaches only lastcall (which then drains), with a watchdog against orphaning.
 *
 * @example
 * ```ts
 * const envoy = spawnEnvoy("/usr/bin/envoy", ["-c", "envoy.yaml"]);
 * const exit = await envoy.exited;
 * ```
 */
export function spawnEnvoy(
  binary: string,
  args: string[],
  options: SpawnOptions = {},
): Promise<EnvoyProcess> {
  return new Promise((resolve, reject) => {
    const child = spawn(binary, args, { stdio: ["ignore", "inherit", "pipe"], detached: true });
    let running = true;
    const recent: string[] = [];
    let partial = "";
    let held: Buffer[] | undefined = options.holdOutput ? [] : undefined;
    child.stderr?.on("data", (chunk: Buffer) => {
      if (held) held.push(chunk);
      else writeErrChunk(chunk);
      const lines = (partial + chunk.toString("utf8")).split("\n");
      partial = lines.pop() ?? "";
      recent.push(...lines.filter(Boolean));
      if (recent.length > KEPT_LINES) recent.splice(0, recent.length - KEPT_LINES);
    });
    let watchdog: ChildProcess | undefined;
    const exited = new Promise<EnvoyExit>((done) => {
      child.once("exit", (code, signal) => {
        running = false;
        // SIGKILL, not closing the pipe: closing would make the watchdog kill a reused pid.
        watchdog?.kill("SIGKILL");
        done({ code, signal });
      });
    });
    child.once(
      "error",
      (error) => reject(new Error(`Cannot start Envoy: ${binary}: ${error.message}`)),
    );
    child.once("spawn", () => {
      const pid = child.pid as number;
      watchdog = startWatchdog(pid);
      const signal = (sig: NodeJS.Signals) => {
        if (running) child.kill(sig);
      };
      resolve({
        pid,
        exited,
        get running() {
          return running;
        },
        signal,
        recentOutput: () => (partial ? [...recent, partial] : [...recent]),
        releaseOutput() {
          for (const chunk of held ?? []) writeErrChunk(chunk);
          held = undefined;
        },
      });
    });
  });
}

/** Options of {@linkcode stopEnvoy}. */
export interface StopOptions {
  /** Envoy's admin, asked first (`POST /quitquitquit`); absent when a hot-restart child took it over. */
  admin?: { quit(signal?: AbortSignal): Promise<unknown> };
  /** Where `envoy_quit_requested`, `envoy_quit_failed` and `envoy_killed` are said. @default silent */
  log?: EventLog;
}

/**
 * Stops one Envoy within `budgetMs`: by its admin's `POST /quitquitquit` when it has one, else
 * by SIGTERM; SIGTERM again after half of what is left, and SIGKILL at the end (which also ends
 * a stopped, hung process). Resolves once it has exited.
 *
 * @example
 * ```ts
 * await stopEnvoy(envoy, 2000, { admin, log });
 * ```
 */
export async function stopEnvoy(
  envoy: EnvoyProcess,
  budgetMs: number,
  options: StopOptions = {},
): Promise<void> {
  const { admin, log = () => {} } = options;
  const startedAt = Date.now();
  const left = () => Math.floor(Math.max(0, budgetMs - (Date.now() - startedAt)));
  const over = new AbortController(); // no timer outlives the stop
  const exitWithin = (ms: number) =>
    Promise.race([envoy.exited, delay(ms, over.signal).then(() => undefined, () => undefined)]);
  if (!envoy.running) return;
  try {
    let asked = false;
    if (admin) {
      try {
        await admin.quit(AbortSignal.timeout(Math.max(1, Math.floor(budgetMs / 3))));
        log("envoy_quit_requested", { pid: envoy.pid });
        asked = true;
      } catch (error) {
        log("envoy_quit_failed", {
          pid: envoy.pid,
          error: String((error as Error).message ?? error),
        });
      }
    }
    if (!asked) envoy.signal("SIGTERM");
    if (await exitWithin(left() / 2)) return;
    envoy.signal("SIGTERM");
    if (await exitWithin(left())) return;
    envoy.signal("SIGKILL");
    const exit = await envoy.exited;
    log("envoy_killed", { pid: envoy.pid, exit: exit.signal ?? exit.code });
  } finally {
    over.abort();
  }
}
