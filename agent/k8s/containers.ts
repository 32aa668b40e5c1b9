// Reading timing facts out of container specs: command lines, flags, environment variables and
// preStop hooks (durations in Go, protobuf JSON or lastcall spellings: lib/duration.ts).
import { parseAnyDuration } from "../lib/duration.ts";
import { isRecord } from "./workloads.ts";

/** The duration reader the checks use (Go, protobuf JSON or lastcall spellings). */
export { parseAnyDuration };

/** A container as it appears in a pod spec (only the fields the checks read). */
export type ContainerSpec = Record<string, unknown>;

/** The containers of a pod spec: regular ones, then init containers (flagged). */
export function podContainers(
  spec: Record<string, unknown>,
): { container: ContainerSpec; init: boolean }[] {
  const list = (
    key: string,
  ) => (Array.isArray(spec[key]) ? (spec[key] as unknown[]).filter(isRecord) : []);
  return [
    ...list("containers").map((container) => ({ container, init: false })),
    ...list("initContainers").map((container) => ({ container, init: true })),
  ];
}

/** The container's name, or `?` when it has none. */
export function containerName(c: ContainerSpec): string {
  return typeof c.name === "string" ? c.name : "?";
}

/** `command` then `args`, the process's argument vector (string items only). */
export function argv(c: ContainerSpec): string[] {
  const strings = (
    v: unknown,
  ) => (Array.isArray(v) ? v.filter((s): s is string => typeof s === "string") : []);
  return [...strings(c.command), ...strings(c.args)];
}

/** Whether the path names a program: `/bin/contour` is `contour`. */
export function isProgram(path: string | undefined, name: string): boolean {
  return path !== undefined && (path === name || path.endsWith(`/${name}`));
}

/**
 * The value of `--flag value` or `--flag=value` in a command line; the last one wins, as with
 * commander and kingpin.
 *
 * @example
 * ```ts
 * flagValue(["run", "--grace", "30s", "--grace=45s"], "--grace"); // "45s"
 * ```
 */
export function flagValue(args: readonly string[], flag: string): string | undefined {
  let value: string | undefined;
  for (let i = 0; i < args.length; i++) {
    if (args[i] === "--") break;
    if (args[i] === flag && i + 1 < args.length) value = args[++i];
    else if (args[i].startsWith(`${flag}=`)) value = args[i].slice(flag.length + 1);
  }
  return value;
}

/** A literal environment variable of the container (`valueFrom` ones cannot be known). */
export function envValue(c: ContainerSpec, name: string): string | undefined {
  if (!Array.isArray(c.env)) return undefined;
  const entry = c.env.find((e) => isRecord(e) && e.name === name);
  if (!isRecord(entry) || entry.value === undefined || entry.value === null) return undefined;
  return String(entry.value);
}

/** An exec hook's command as written; undefined for another kind of hook, or none. */
export function handlerCommand(handler: unknown): string[] | undefined {
  if (!isRecord(handler) || !isRecord(handler.exec) || !Array.isArray(handler.exec.command)) {
    return undefined;
  }
  return handler.exec.command.map(String);
}

/** What a hook or a command does, as a command line; `sh -c "…"` is split into words. */
export function handlerArgv(handler: unknown): string[] | undefined {
  const command = handlerCommand(handler);
  if (command && command.length >= 3 && isShell(command[0]) && command[1] === "-c") {
    return command[2].split(/[\s;&|]+/).filter(Boolean);
  }
  return command;
}

/** Whether `path` names a POSIX shell (`sh`, `bash`, `ash`, `dash`, by any directory). */
export const isShell = (path: string | undefined) =>
  ["sh", "bash", "ash", "dash"].some((shell) => isProgram(path, shell));

/** The preStop hook, as far as its duration goes. */
export type PreStop =
  | { kind: "none" }
  /** Sleeps this long (a `sleep` action, or `sleep N` in an exec hook), then the app gets SIGTERM. */
  | { kind: "sleep"; ms: number }
  /** lastcall's `GET /v1/app-stop` on `port`: waits for the proxy's inbound quiet. */
  | { kind: "app-stop"; port: unknown }
  /** Something else (an HTTP call, a script): how long it takes is not in the manifest. */
  | { kind: "other"; what: string };

/** Reads a container's preStop hook. */
export function preStopOf(c: ContainerSpec): PreStop {
  const hook = isRecord(c.lifecycle) ? c.lifecycle.preStop : undefined;
  if (!isRecord(hook)) return { kind: "none" };
  if (isRecord(hook.sleep) && typeof hook.sleep.seconds === "number") {
    return { kind: "sleep", ms: hook.sleep.seconds * 1000 };
  }
  const words = handlerArgv(hook);
  if (words) {
    // `sleep 5 && nginx -s quit`: the sleeps are the part whose length is known.
    let ms = 0;
    let found = false;
    words.forEach((word, i) => {
      if (!isProgram(word, "sleep")) return;
      const value = sleepArgsMs(words.slice(i + 1));
      if (value !== undefined) (ms += value), (found = true);
    });
    if (found) return { kind: "sleep", ms };
    return { kind: "other", what: `exec ${words.join(" ")}` };
  }
  if (isRecord(hook.httpGet) && hook.httpGet.path === "/v1/app-stop") {
    return { kind: "app-stop", port: hook.httpGet.port };
  }
  if (isRecord(hook.httpGet)) {
    return { kind: "other", what: `GET ${String(hook.httpGet.path ?? "/")}` };
  }
  return { kind: "other", what: "hook" };
}

/** GNU `sleep`'s units: a number alone is seconds. */
const SLEEP_UNIT_MS: Record<string, number> = {
  "": 1000,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
};
/** A number as C's `strtod` reads it (decimal with an exponent, or hexadecimal), then a unit. */
const SLEEP_ARG = /^\+?(\d+\.?\d*(?:e[+-]?\d+)?|\.\d+(?:e[+-]?\d+)?|0x[0-9a-f]+)([smhd]?)$/i;

/**
 * How long `sleep ARGS` sleeps, as GNU coreutils reads it (BusyBox alike but for hexadecimal):
 * each argument a number (`1e3`, `0x10`, `.5`) with an optional unit (`s`, `m`, `h`, `d`), the
 * arguments added up (`sleep 2 3`: 5 s), up to the first word that is none (`&&`, `;`). Also a
 * duration in another tool's form (`1m30s`), alone. Undefined when the first is none
 * (`infinity`, `$DELAY`).
 *
 * @example
 * ```ts
 * sleepArgsMs(["2", "3", "&&", "nginx"]); // 5000
 * ```
 */
export function sleepArgsMs(args: readonly string[]): number | undefined {
  let ms: number | undefined;
  for (const [i, arg] of args.entries()) {
    const m = SLEEP_ARG.exec(arg);
    const value = m ? Number(m[1]) * SLEEP_UNIT_MS[m[2].toLowerCase()] : undefined;
    if (value === undefined || !Number.isFinite(value)) return i === 0 ? tryDuration(arg) : ms;
    ms = (ms ?? 0) + value;
  }
  return ms;
}

/** {@linkcode parseAnyDuration}, or undefined for text that is not a duration. */
export function tryDuration(text: string): number | undefined {
  try {
    return parseAnyDuration(text);
  } catch {
    return undefined;
  }
}
