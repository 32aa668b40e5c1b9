// `lastcall status`: asks a running lastcall what it is doing (`GET /v1/state` on its status
// address) and prints it for people (status-format.ts), or as the JSON it answered (`--json`).
import type { Option } from "commander";
import { formatDuration } from "../lib/duration.ts";
import { option, statusUrlArg } from "../options.ts";
import { writeErr, writeOut } from "../runtime/process.ts";
import { formatStatus } from "./status-format.ts";

/** The status address of a `lastcall run` on its defaults. */
export const DEFAULT_STATUS_BASE = "http://127.0.0.1:15020";

/**
 * `--status-url` of the shutdown hooks (`shutdown`, `gateway shutdown`): as {@linkcode statusUrlOption}
 * reads it, or `""` for none (no `lastcall run` beside Envoy).
 *
 * @example
 * ```ts
 * optionalStatusUrlArg(""); // ""
 * optionalStatusUrlArg("127.0.0.1:15020/healthz/ready"); // "http://127.0.0.1:15020"
 * ```
 */
export function optionalStatusUrlArg(value: string): string {
  return value.trim() === "" ? "" : statusUrlArg(value);
}

/**
 * `--status-url` (`LASTCALL_STATUS_URL`) of `status`, `wait`, `exec` and `drain`: one parser
 * (`statusUrlArg`), so the same value works in all of them: a base URL, `host:port`, or any URL
 * of the status server (its origin is used, so `wait`'s `.../healthz/ready` works as it is).
 *
 * @example
 * ```ts
 * program.command("drain").addOption(statusUrlOption());
 * ```
 */
export function statusUrlOption(): Option {
  return option(
    "--status-url <url>",
    "the agent's status server: a base URL, host:port, or any URL of it (its origin is used)",
  )
    .default(DEFAULT_STATUS_BASE).argParser(statusUrlArg);
}

/** Options of {@linkcode statusCommand}. */
export interface StatusOptions {
  /** The status server's origin, as `statusUrlArg` (options.ts) makes it. @default "http://127.0.0.1:15020" */
  statusUrl: string;
  /** Print `/v1/state` as it was answered, one line of JSON. @default false */
  json: boolean;
  /** Give up on an answer after this long. @default 2000 */
  timeoutMs: number;
}

/** Why `url` gave no answer, in one line naming it. */
function failure(url: string, error: unknown, timeoutMs: number): string {
  const name = (error as Error).name;
  if (name === "TimeoutError" || name === "AbortError") {
    return `${url} did not answer within ${formatDuration(timeoutMs)}`;
  }
  // fetch says only "fetch failed"; the reason (ECONNREFUSED, …) is in its cause.
  const cause = (error as { cause?: { code?: string; message?: string } }).cause;
  return `cannot reach ${url}: ${cause?.code ?? cause?.message ?? (error as Error).message}`;
}

/**
 * A short, printable piece of a body, for an error line (`lastcall status`, `wait`).
 *
 * @example
 * ```ts
 * excerpt("<html>\n  404 page not found</html>"); // "\"<html> 404 page not found</html>\""
 * ```
 */
export function excerpt(body: string): string {
  const text = body.trim().replace(/\s+/g, " ");
  return JSON.stringify(text.length > 80 ? `${text.slice(0, 80)}…` : text);
}

/** GETs `url`'s body when it answers 200 with a JSON object; throws one line naming the URL otherwise. */
async function readState(
  url: string,
  signal: AbortSignal,
  timeoutMs: number,
): Promise<{ body: string; state: object }> {
  let response: Response;
  let body: string;
  try {
    response = await fetch(url, { signal, headers: { accept: "application/json" } });
    body = await response.text();
  } catch (error) {
    throw new Error(failure(url, error, timeoutMs));
  }
  if (response.status !== 200) {
    throw new Error(`${url} answered ${response.status}: ${excerpt(body)}`);
  }
  let state: unknown;
  try {
    state = JSON.parse(body);
  } catch {
    throw new Error(`${url} answered something that is not JSON: ${excerpt(body)}`);
  }
  if (typeof state !== "object" || state === null || Array.isArray(state)) {
    throw new Error(`${url} answered JSON that is not lastcall's state: ${excerpt(body)}`);
  }
  return { body, state };
}

/** The readiness answer, or undefined when there is none (the state is shown without it). */
async function readiness(base: string, signal: AbortSignal): Promise<unknown> {
  try {
    return await (await fetch(`${base}/healthz/ready`, { signal })).json();
  } catch {
    return undefined;
  }
}

/**
 * `lastcall status`: prints what a running lastcall is doing, from `GET /v1/state` on its status
 * address: phase, readiness, Envoy epoch and pid, requests in flight, restarts and, during a
 * drain, what it waits for (oldest first), the time left to the deadline and the apps still
 * running. `--json` prints `/v1/state` as it was answered (one line, for `jq`). Exits 0 with an
 * answer; 1, with one line naming the URL and the cause, when there is none within the timeout,
 * or it is not 200 or not a JSON object.
 *
 * @example
 * ```ts
 * process.exitCode = await statusCommand({ statusUrl: "http://127.0.0.1:15020", json: false, timeoutMs: 2000 });
 * ```
 */
export async function statusCommand(options: StatusOptions): Promise<number> {
  const url = `${options.statusUrl}/v1/state`;
  const signal = AbortSignal.timeout(options.timeoutMs);
  const ready = options.json ? undefined : readiness(options.statusUrl, signal);
  let answer: { body: string; state: object };
  try {
    answer = await readState(url, signal, options.timeoutMs);
  } catch (error) {
    writeErr(`lastcall status: ${(error as Error).message}`);
    return 1;
  }
  if (options.json) {
    writeOut(answer.body.trimEnd());
    return 0;
  }
  for (const line of formatStatus(answer.state, { readiness: await ready, now: Date.now() })) {
    writeOut(line);
  }
  return 0;
}
