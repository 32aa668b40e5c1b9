// Every option of every command in one table: flag, default, environment variable, validation.
// Commander does the parsing; the parsers here refuse bad values with the flag and the value.
import { type Command, InvalidArgumentError, Option } from "commander";
import {
  DurationTooLongError,
  formatDuration,
  MAX_DURATION_TEXT,
  parseDuration,
} from "./lib/duration.ts";

/** How the termination sequence decides that draining is over. */
export type DrainMode = "inflight" | "requests" | "connections" | "sleep";
/** Which listeners are drained on termination. */
export type DrainScope = "inbound" | "all";

/** Options of `lastcall run`, after defaults and validation. */
export interface RunOptions {
  /** The user's Envoy config (YAML or JSON). */
  config: string;
  /** Envoy binary. @default $ENVOY_BIN, else `envoy` on PATH */
  envoy?: string;
  /** Envoy admin port on 127.0.0.1; 0 picks a free one. @default 15000 */
  adminPort: number;
  /** Serve Envoy's admin on this Unix socket instead of 127.0.0.1:`adminPort` (when the config has no admin). */
  adminSocket?: string;
  /** Status server port; 0 picks a free one. @default 15020 */
  statusPort: number;
  /** Status server address. @default "127.0.0.1" */
  statusAddress: string;
  /** Envoy worker threads. @default 2 */
  concurrency: number;
  /** Files whose change triggers a hot restart. @default [] */
  watch: string[];
  /** Hot restart on reload; false means stop and start again. @default true */
  hotRestart: boolean;
  /** Crash restarts allowed per desired config. @default 10 */
  restartBudget: number;
  /** Format of lastcall's own event lines. @default "json" */
  logFormat: "json" | "text";
  /** Insert the in-flight filter into inbound HTTP connection managers. @default true */
  filter: boolean;
  /** The filter module; defaults to the one shipped with lastcall. */
  filterWasm?: string;
  /** Request paths the filter does not count (probes, scrapes). @default [] */
  excludePath: string[];
  /** Filter heartbeat period. @default 1000 */
  heartbeatMs: number;
  /**
   * Name the method and path of what holds a drain (`drain_waiting`, `/v1/state`): the filter reads
   * them at every request's headers (plugin key `holder_paths`). @default false
   */
  holderPaths: boolean;
  /** Folder for generated bootstraps; defaults to a fresh temporary folder. */
  runDir?: string;
  /**
   * Envoy's --drain-time-s: how long draining listeners still accept connections. Raised at start
   * (when left at its default) so that they accept for the whole floor. @default 5000
   */
  drainTimeMs: number;
  /**
   * The longest an old Envoy of a reload is given to finish: lastcall stops it as soon as it has
   * nothing in flight and nothing left to send, at the latest after this (Envoy's own
   * --parent-shutdown-time-s is set past it, so Envoy's timer never cuts first). @default 600000
   */
  parentShutdownMs: number;
  /** Termination: the pod's grace period; the drain ends before it. @default 30000 */
  graceMs: number;
  /** Termination: how the end of the drain is detected. @default "inflight" */
  drainMode: DrainMode;
  /** Termination: wait before draining listeners, for load balancers to notice. @default 0 */
  drainDelayMs: number;
  /** Termination: never stop Envoy earlier than this after the signal. @default 5000 */
  minDrainMs: number;
  /** Termination: sleep length of `--drain-mode sleep`. @default 5000 */
  terminationDrainMs: number;
  /** Termination: listeners to drain. @default "inbound" */
  drainScope: DrainScope;
  /** Termination: POST /healthcheck/fail before draining. @default false (true with --role gateway) */
  failHealthcheck: boolean;
  /** Termination: time kept back from the deadline for stopping Envoy. @default 2000 */
  stopMarginMs: number;
  /** Termination: the app's port on 127.0.0.1; while it accepts connections the app runs. */
  appPort?: number;
  /** Extra arguments passed to Envoy as they are. @default [] */
  envoyArgs: string[];
}

/** Refuses a value with the reason; commander prefixes the flag and the value. */
function invalid(reason: string): never {
  throw new InvalidArgumentError(reason);
}

/** Parses a duration option value, at most the longest a timer can hold. */
export function durationArg(value: string): number {
  try {
    return parseDuration(value);
  } catch (error) {
    if (error instanceof DurationTooLongError) {
      return invalid(`Expected at most ${MAX_DURATION_TEXT}: a timer cannot hold more.`);
    }
    return invalid("Expected a duration such as 500ms, 5s or 2m.");
  }
}

/** Returns a parser for an integer option within [min, max]. */
export function integerArg(min: number, max: number): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (!/^\s*\d+\s*$/.test(value) || n < min || n > max) {
      invalid(`Expected a whole number from ${min} to ${max}.`);
    }
    return n;
  };
}

/** Returns a parser that accepts one of `choices`. */
export function choiceArg<T extends string>(choices: readonly T[]): (value: string) => T {
  return (
    value,
  ) => (choices.includes(value as T)
    ? (value as T)
    : invalid(`Expected one of: ${choices.join(", ")}.`));
}

/**
 * Parses `--status-url` of `lastcall status`, `wait`, `exec` and `drain` into the status server's
 * origin: a base URL, any URL of the status server (`lastcall wait`'s `.../healthz/ready`
 * included) or `host:port`; anything else (`unix:/x`, `ftp://…`, `host:abc`) is refused.
 *
 * @example
 * ```ts
 * statusUrlArg("http://127.0.0.1:15020/healthz/ready"); // "http://127.0.0.1:15020"
 * statusUrlArg("10.0.0.7:15020"); // "http://10.0.0.7:15020"
 * ```
 */
export function statusUrlArg(value: string): string {
  const text = value.trim();
  const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(text);
  let url: URL | undefined;
  try {
    // Without a scheme only `host`, `host:port` or `[v6]:port` (then anything): `unix:/x` is no host.
    if (withScheme || /^(\[[^\]]*\]|[^\s/:?#[\]]+)(:\d+)?([/?#]|$)/.test(text)) {
      url = new URL(withScheme ? text : `http://${text}`);
    }
  } catch { /* refused below */ }
  if (!url || (url.protocol !== "http:" && url.protocol !== "https:") || !url.hostname) {
    invalid("Expected the status server's http URL, such as http://127.0.0.1:15020.");
  }
  return url.origin;
}

// A Map, not an object literal: `"constructor"` must not find Object.prototype's.
const BOOLEAN_VALUES = new Map([["true", true], ["1", true], ["false", false], ["0", false]]);

/**
 * Parses the value of a boolean environment variable: `true`, `false`, `1` or `0`, in any case.
 *
 * @param name The variable, for the message
 * @param value Its value
 * @returns What the value means
 * @throws {RangeError} naming the variable and the value when it is anything else
 * @example
 * ```ts
 * parseBoolean("LASTCALL_NO_FILTER", "TRUE"); // true
 * ```
 */
export function parseBoolean(name: string, value: string): boolean {
  const parsed = BOOLEAN_VALUES.get(value.toLowerCase());
  if (parsed === undefined) {
    throw new RangeError(`${name} must be true, false, 1 or 0, not ${JSON.stringify(value)}`);
  }
  return parsed;
}

/**
 * Makes the environment variables of `command`'s boolean flags strict. Commander turns a flag
 * on whenever its variable exists, whatever it holds, so `LASTCALL_NO_FILTER=false` would
 * disable the filter. After this, each variable must be `true`, `false`, `1` or `0`:
 * `LASTCALL_X=true` is `--x` and `LASTCALL_X=false` turns x off; `LASTCALL_NO_X=true` is
 * `--no-x` and `LASTCALL_NO_X=false` is as if the variable were not set. A flag on the command
 * line wins over its variables, but a bad value is refused either way.
 *
 * Call it once the command has all its options; the check runs before the command's action
 * and throws a `RangeError` naming the variable and the value (or the two variables that
 * contradict each other).
 *
 * @param command A command whose options were made with {@linkcode option}
 * @param env The environment to read
 */
export function strictBooleanEnvironment(
  command: Command,
  env: () => Record<string, string | undefined>,
): void {
  const groups = new Map<string, Option[]>();
  for (const opt of command.options) {
    if (opt.required || opt.optional || !opt.envVar) continue;
    const key = opt.attributeName();
    groups.set(key, [...(groups.get(key) ?? []), opt]);
  }
  // The values before parsing are the defaults commander would fall back to.
  const defaults = new Map([...groups.keys()].map((key) => [key, command.getOptionValue(key)]));
  command.hook("preAction", function strictBooleans() {
    const vars = env();
    for (const [key, opts] of groups) {
      let value: boolean | undefined;
      let from = "";
      for (const opt of opts) {
        const text = vars[opt.envVar!];
        if (text === undefined) continue;
        const on = parseBoolean(opt.envVar!, text);
        const meant = opt.negate ? (on ? false : undefined) : on;
        if (meant === undefined) continue;
        if (value !== undefined && value !== meant) {
          throw new RangeError(`${from} contradicts ${opt.envVar}=${text}`);
        }
        value = meant;
        from = `${opt.envVar}=${text}`;
      }
      if (command.getOptionValueSource(key) !== "env") continue;
      if (value === undefined) command.setOptionValueWithSource(key, defaults.get(key), "default");
      else command.setOptionValueWithSource(key, value, "env");
    }
  });
}

/** Collects a repeatable option; a value (or an environment variable) may hold a comma-separated list. */
export function listArg(value: string, previous: string[] = []): string[] {
  return [...previous, ...value.split(",").map((s) => s.trim()).filter(Boolean)];
}

/** Environment variable of a flag: `--admin-port` → `LASTCALL_ADMIN_PORT`. */
export function envName(flag: string): string {
  return `LASTCALL_${flag.replace(/^--/, "").replace(/-/g, "_").toUpperCase()}`;
}

/** Creates a commander option whose environment variable follows the `LASTCALL_<FLAG>` rule. */
export function option(flags: string, description: string): Option {
  const long = /--[a-z0-9-]+/.exec(flags)?.[0] ?? flags;
  return new Option(flags, description).env(envName(long));
}

/** How values are written, shown after every command's `--help`. */
export const VALUE_SYNTAX_HELP = `
Durations: 500ms, 5s, 2m, 1h, or a bare number of seconds; at most ${MAX_DURATION_TEXT}.
Every flag is also an environment variable (shown as env); boolean ones take true, false, 1 or 0.`;

/**
 * The timing defaults of `lastcall run`, in ms: its `--help` and `lastcall check` (which models a
 * sidecar left at them) both read them here.
 */
export const RUN_DEFAULTS = {
  graceMs: 30_000,
  drainDelayMs: 0,
  drainTimeMs: 5000,
  minDrainMs: 5000,
  terminationDrainMs: 5000,
  stopMarginMs: 2000,
  heartbeatMs: 1000,
  parentShutdownMs: 600_000,
} as const;

/** A duration option's default: the value in ms, and in `--help` as a flag is written (`0s`, `5s`, `10m`). */
function durationDefault(o: Option, ms: number): Option {
  return o.default(ms, ms === 0 ? "0s" : formatDuration(ms));
}

/** The options of `lastcall run`, in the order `--help` lists them. */
export function runOptionList(): Option[] {
  return [
    option("-c, --config <file>", "the Envoy config (YAML or JSON) to run").makeOptionMandatory(),
    option("--envoy <path>", "Envoy binary (default: $ENVOY_BIN, else envoy on PATH)"),
    option("--admin-port <port>", "Envoy admin port on 127.0.0.1 (0: any free port)").default(15000)
      .argParser(integerArg(0, 65535)),
    option(
      "--admin-socket <path>",
      "serve Envoy's admin on this Unix socket instead (a config's own admin pipe is used as it is)",
    ),
    option("--status-port <port>", "status server port (0: any free port)").default(15020)
      .argParser(integerArg(0, 65535)),
    option(
      "--status-address <address>",
      "status server address; 0.0.0.0 for kubelet probes (POST /quitquitquit and /drain still answer loopback only)",
    ).default("127.0.0.1"),
    option("--concurrency <n>", "Envoy worker threads").default(2).argParser(integerArg(1, 256)),
    option("--watch <path>", "reload Envoy when this file changes (repeatable or comma-separated)")
      .default([]).argParser(listArg),
    option(
      "--no-hot-restart",
      "reload (SIGHUP, --watch) by a cold restart: no shared memory needed, but not ready (no listener after the drain time) until the old Envoy has finished and the new one is LIVE",
    ),
    option(
      "--restart-budget <n>",
      "crash restarts allowed per config (refilled by a config change or 60s of running)",
    ).default(10).argParser(integerArg(0, 1000)),
    option("--log-format <format>", "json | text: lastcall's own event lines").default("json")
      .argParser(choiceArg(["json", "text"] as const)),
    option("--no-filter", "do not insert the in-flight filter"),
    option(
      "--filter-wasm <path>",
      "the in-flight filter module (default: the one shipped with lastcall)",
    ),
    option(
      "--exclude-path <path>",
      "request path the filter does not count; '*' suffix for a prefix (repeatable or comma-separated)",
    ).default([]).argParser(listArg),
    durationDefault(
      option("--heartbeat <duration>", "filter heartbeat period"),
      RUN_DEFAULTS.heartbeatMs,
    ).argParser(durationArg),
    option(
      "--holder-paths",
      "name the method and path of the requests a drain waits for (costs two header reads per request)",
    ),
    option(
      "--run-dir <dir>",
      "folder for generated bootstraps, lastcall's alone: made fresh (0700) at start (default: a new temporary folder)",
    ),
    durationDefault(
      option(
        "--drain-time <duration>",
        "Envoy --drain-time-s, rounded up to whole seconds: how long draining listeners still accept (left at its default, raised to cover --min-drain)",
      ),
      RUN_DEFAULTS.drainTimeMs,
    ).argParser(durationArg),
    durationDefault(
      option(
        "--parent-shutdown <duration>",
        "the longest the old Envoy of a reload may finish its requests and deliveries; what is left then is cut and said",
      ),
      RUN_DEFAULTS.parentShutdownMs,
    ).argParser(durationArg),
    option(
      "--role <role>",
      "sidecar or gateway: gateway defaults --fail-healthcheck on and --drain-scope all",
    ).default("sidecar").argParser(choiceArg(["sidecar", "gateway"] as const)),
    durationDefault(
      option(
        "--grace <duration>",
        "the pod's terminationGracePeriodSeconds: the drain ends --stop-margin before it",
      ),
      RUN_DEFAULTS.graceMs,
    ).argParser(durationArg),
    option("--drain-mode <mode>", "inflight | requests | connections | sleep: what ends the drain")
      .default("inflight").argParser(
        choiceArg(["inflight", "requests", "connections", "sleep"] as const),
      ),
    durationDefault(
      option(
        "--drain-delay <duration>",
        "wait before draining listeners, for load balancers to notice (at or above the default --min-drain, the floor becomes this plus 5s)",
      ),
      RUN_DEFAULTS.drainDelayMs,
    ).argParser(durationArg),
    durationDefault(
      option(
        "--min-drain <duration>",
        "never stop Envoy sooner after the signal (Istio: MINIMUM_DRAIN_DURATION)",
      ),
      RUN_DEFAULTS.minDrainMs,
    ).argParser(durationArg),
    durationDefault(
      option(
        "--termination-drain <duration>",
        "how long --drain-mode sleep sleeps (Istio: TERMINATION_DRAIN_DURATION)",
      ),
      RUN_DEFAULTS.terminationDrainMs,
    ).argParser(durationArg),
    option("--drain-scope <scope>", "inbound | all (default: inbound; all with --role gateway)")
      .argParser(choiceArg(["inbound", "all"] as const)),
    option(
      "--fail-healthcheck",
      "POST /healthcheck/fail before draining (default with --role gateway)",
    ),
    option(
      "--no-fail-healthcheck",
      "do not fail Envoy's health check filter, even with --role gateway",
    ),
    option(
      "--app-port <port>",
      "the app's port on 127.0.0.1: on termination Envoy is kept (for the app's outbound calls) until it stops accepting connections",
    ).argParser(integerArg(1, 65535)),
    durationDefault(
      option("--stop-margin <duration>", "time kept back from --grace to stop Envoy"),
      RUN_DEFAULTS.stopMarginMs,
    ).argParser(durationArg),
  ];
}
