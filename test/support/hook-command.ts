// A lastcall hook command (`shutdown`, `shutdown-manager`, `gateway ...`) run as a child of the
// test, its JSON event lines followed as they come, so a test waits on `healthcheck_failed` or
// `drained` rather than on a sleep, and reads the order and times of the steps from them.
import { type ChildProcess, spawn } from "node:child_process";
import { afterEach } from "vitest";
import { followJsonEvents } from "./json-events.ts";
import { lastcallCommand, type LastcallEvent } from "./lastcall.ts";

/** A running hook command. */
export interface HookCommand {
  readonly child: ChildProcess;
  /** Every event line so far, in order. */
  readonly events: LastcallEvent[];
  /** Resolves with the first event named `name` (past or future); rejects if the command exits first or at the deadline. */
  event(name: string, timeoutMs?: number): Promise<LastcallEvent>;
  /** stderr so far. */
  stderr(): string;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

const running = new Set<ChildProcess>();
afterEach(() => {
  for (const child of running) child.kill("SIGKILL");
  running.clear();
});

/** Options of {@linkcode startHook}. */
export interface HookOptions {
  /** Run this executable instead of the bundle (e.g. a link named `envoy-gateway` to dist/lastcall). */
  executable?: string;
  env?: Record<string, string>;
}

/**
 * Starts `lastcall ARGS...` (the bundle unless `executable`); killed after the test if still running.
 *
 * @example
 * ```ts
 * const hook = startHook(["shutdown", "--admin-address", socket]);
 * await hook.event("healthcheck_failed");
 * ```
 */
export function startHook(args: string[], options: HookOptions = {}): HookCommand {
  const command = options.executable ? [options.executable] : lastcallCommand();
  const child = spawn(command[0], [...command.slice(1), ...args], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, ...options.env },
  });
  running.add(child);
  let stderr = "";
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const follow = followJsonEvents<LastcallEvent>(child.stdout!, {
    parse: (line) => {
      try {
        return JSON.parse(line) as LastcallEvent;
      } catch {
        return { ts: new Date().toISOString(), event: "not_json", line };
      }
    },
  });
  const events = follow.events;
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((done) =>
    child.once("close", (code, signal) => {
      running.delete(child);
      follow.end();
      done({ code, signal });
    })
  );
  return {
    child,
    events,
    event: (name, timeoutMs = 30_000) =>
      follow.next(name, {
        timeoutMs,
        ended: () =>
          new Error(`exited without a ${name} event; events: ${JSON.stringify(events)}\n${stderr}`),
        timedOut: () =>
          new Error(
            `no ${name} event after ${timeoutMs} ms; events: ${JSON.stringify(events)}\n${stderr}`,
          ),
      }),
    stderr: () => stderr,
    exited,
  };
}

/** Milliseconds from event `a` to event `b`, by their `ts`. */
export function msBetween(a: LastcallEvent, b: LastcallEvent): number {
  return Date.parse(b.ts) - Date.parse(a.ts);
}
