// `lastcall run`: the options resolved and checked (Istio's variables, timers made to agree),
// then the agent run to its exit code.
import { accessSync, constants, statSync } from "node:fs";
import { delimiter, join } from "node:path";
import type { Command } from "commander";
import { EXIT, StartError } from "../lib/errors.ts";
import {
  DurationTooLongError,
  formatDuration,
  MAX_DURATION_TEXT,
  parseAnyDuration,
} from "../lib/duration.ts";
import { refuseEnvoyArgClash } from "../envoy/arg-clash.ts";
import { createEventLog } from "../lib/log.ts";
import { parseBoolean, type RunOptions } from "../options.ts";
import { environment, writeErr } from "../runtime/process.ts";
import { bindStatus, type BoundServer } from "../status/listen.ts";

/** A bad combination of options: one line naming the values, exit 2. */
export class UsageError extends Error {
  override name = "UsageError";
}

/** Finds Envoy: `--envoy`, then `$ENVOY_BIN`, then `envoy` on PATH. */
export function findEnvoy(explicit: string | undefined, env = environment()): string {
  const isExecutable = (path: string) => {
    try {
      accessSync(path, constants.X_OK);
      return statSync(path).isFile(); // a folder passes X_OK too
    } catch {
      return false;
    }
  };
  for (const [source, path] of [["--envoy", explicit], ["ENVOY_BIN", env.ENVOY_BIN]] as const) {
    if (!path) continue;
    if (!isExecutable(path)) {
      throw new UsageError(`Envoy binary from ${source} is not executable: ${path}`);
    }
    return path;
  }
  const found = (env.PATH ?? "").split(delimiter).map((dir) => join(dir, "envoy")).find(
    isExecutable,
  );
  if (!found) {
    throw new UsageError("Envoy not found: pass --envoy PATH, set ENVOY_BIN, or put envoy on PATH");
  }
  return found;
}

/** Parses the duration in Istio variable `name`; refuses it with the variable and the value. */
function istioDuration(name: string, value: string): number {
  try {
    return Math.round(parseAnyDuration(value)); // Go spellings too, as pilot-agent reads them
  } catch (error) {
    if (error instanceof DurationTooLongError) {
      throw new UsageError(
        `Invalid ${name}: "${value}" is longer than a timer can hold (${MAX_DURATION_TEXT})`,
      );
    }
    throw new UsageError(`Invalid ${name}: "${value}" (use e.g. 5s)`);
  }
}

/**
 * Applies Istio's environment variables where no lastcall flag or variable was given, so a
 * pilot-agent deployment keeps its drain behaviour (see docs/migration.md).
 *
 * @returns What was applied, for the `istio_environment` event
 * @throws {UsageError} naming the variable and the value when one holds a bad duration
 * @throws {RangeError} naming the variable and the value when `EXIT_ON_ZERO_ACTIVE_CONNECTIONS`
 * is not true, false, 1 or 0
 */
export function applyIstioEnvironment(
  options: RunOptions,
  isDefault: (key: string) => boolean,
  env = environment(),
): string[] {
  const applied: string[] = [];
  const exitOnZero = env.EXIT_ON_ZERO_ACTIVE_CONNECTIONS;
  // Checked even when --drain-mode wins: a typo in the pod spec should not pass silently.
  if (
    exitOnZero !== undefined && parseBoolean("EXIT_ON_ZERO_ACTIVE_CONNECTIONS", exitOnZero) &&
    isDefault("drainMode")
  ) {
    options.drainMode = "connections";
    applied.push("EXIT_ON_ZERO_ACTIVE_CONNECTIONS→--drain-mode connections");
  }
  const terminationVar = env.TERMINATION_DRAIN_DURATION !== undefined
    ? "TERMINATION_DRAIN_DURATION"
    : "TERMINATION_DRAIN_DURATION_SECONDS";
  const termination = env[terminationVar];
  if (termination !== undefined && isDefault("terminationDrainMs")) {
    options.terminationDrainMs = istioDuration(terminationVar, termination);
    applied.push(
      `${terminationVar}→--termination-drain ${formatDuration(options.terminationDrainMs)}`,
    );
    if (isDefault("drainMode") && options.drainMode === "inflight") {
      options.drainMode = "sleep";
      applied.push(`${terminationVar}→--drain-mode sleep`);
    }
  }
  if (env.MINIMUM_DRAIN_DURATION !== undefined && isDefault("minDrainMs")) {
    options.minDrainMs = istioDuration("MINIMUM_DRAIN_DURATION", env.MINIMUM_DRAIN_DURATION);
    applied.push(`MINIMUM_DRAIN_DURATION→--min-drain ${formatDuration(options.minDrainMs)}`);
  }
  return applied;
}

/** Envoy's --drain-time-s is whole seconds: what `ms` becomes there. */
const wholeSeconds = (ms: number) => Math.max(1, Math.ceil(ms / 1000)) * 1000;

/**
 * Makes the timers agree, so none cuts what another promises: the floor (`--min-drain`) never
 * ends before the listeners were asked to drain (`--drain-delay`), and Envoy's draining
 * listeners keep accepting (`--drain-time`) until the floor ends. A timer left at its default is
 * raised to fit; two set by the user that contradict each other are refused.
 *
 * @param explicit Whether the user set an option (flag, variable, or Istio's variable)
 * @returns What was raised, for the `timings_resolved` event
 * @throws {UsageError} naming both values when the user's own settings contradict each other
 */
export function resolveTimings(
  o: RunOptions,
  explicit: (key: "minDrainMs" | "drainTimeMs") => boolean,
): string[] {
  const f = formatDuration;
  const resolved: string[] = [];
  if (o.drainDelayMs > 0 && o.drainDelayMs >= o.minDrainMs) {
    if (explicit("minDrainMs")) {
      throw new UsageError(
        `--drain-delay ${f(o.drainDelayMs)} must be shorter than --min-drain ${
          f(o.minDrainMs)
        }: the drain could end before Envoy's listeners start draining`,
      );
    }
    if (o.drainDelayMs + o.minDrainMs >= o.graceMs - o.stopMarginMs) {
      throw new UsageError(
        `--drain-delay ${f(o.drainDelayMs)} plus the default --min-drain ${
          f(o.minDrainMs)
        } does not fit in --grace ${f(o.graceMs)} minus --stop-margin ${
          f(o.stopMarginMs)
        }: set --min-drain above --drain-delay`,
      );
    }
    o.minDrainMs = o.drainDelayMs + o.minDrainMs;
    resolved.push(
      `--min-drain ${f(o.minDrainMs)} (--drain-delay ${f(o.drainDelayMs)} plus the default floor)`,
    );
  }
  const accepting = o.minDrainMs - o.drainDelayMs; // how long listeners must accept once draining
  if (o.drainTimeMs < accepting) {
    if (explicit("drainTimeMs")) {
      throw new UsageError(
        `--drain-time ${f(o.drainTimeMs)} closes Envoy's listeners before --min-drain ${
          f(o.minDrainMs)
        } ends: set --drain-time to at least ${f(wholeSeconds(accepting))}`,
      );
    }
    o.drainTimeMs = wholeSeconds(accepting);
    resolved.push(`--drain-time ${f(o.drainTimeMs)} (listeners accept until --min-drain ends)`);
  }
  return resolved;
}

/** Refuses timings that cannot all hold within the grace period, with the numbers. */
export function checkTimings(o: RunOptions): void {
  const budget = o.graceMs - o.stopMarginMs;
  const f = formatDuration;
  if (budget <= 0) {
    throw new UsageError(
      `--stop-margin ${f(o.stopMarginMs)} leaves no time within --grace ${f(o.graceMs)}`,
    );
  }
  if (o.drainDelayMs >= budget) {
    throw new UsageError(
      `--drain-delay ${f(o.drainDelayMs)} must be shorter than --grace ${
        f(o.graceMs)
      } minus --stop-margin ${f(o.stopMarginMs)}`,
    );
  }
  if (o.minDrainMs >= budget) {
    throw new UsageError(
      `--min-drain ${f(o.minDrainMs)} must be shorter than --grace ${
        f(o.graceMs)
      } minus --stop-margin ${f(o.stopMarginMs)}`,
    );
  }
  if (o.drainMode === "sleep" && o.drainDelayMs + o.terminationDrainMs > budget) {
    throw new UsageError(
      `--termination-drain ${f(o.terminationDrainMs)} does not fit in --grace ${
        f(o.graceMs)
      } minus --stop-margin ${f(o.stopMarginMs)}`,
    );
  }
  // The filter's heartbeats carry the count outside a drain and the channel for probes in it.
  if (o.heartbeatMs < 100 || o.heartbeatMs > 60_000) {
    throw new UsageError(`--heartbeat ${f(o.heartbeatMs)} must be from 100ms to 1m`);
  }
}

/** Turns commander's parsed values into validated {@linkcode RunOptions}. */
export function resolveRunOptions(command: Command, envoyArgs: string[]): RunOptions {
  const v = command.opts();
  const isDefault = (key: string) => {
    const source = command.getOptionValueSource(key);
    return source === undefined || source === "default";
  };
  const gateway = v.role === "gateway";
  // Boolean variables were made strict by strictBooleanEnvironment before the action.
  const options: RunOptions = {
    config: v.config,
    envoy: v.envoy,
    adminPort: v.adminPort,
    adminSocket: v.adminSocket,
    statusPort: v.statusPort,
    statusAddress: v.statusAddress,
    concurrency: v.concurrency,
    watch: v.watch,
    hotRestart: v.hotRestart !== false,
    restartBudget: v.restartBudget,
    logFormat: v.logFormat,
    filter: v.filter !== false,
    filterWasm: v.filterWasm,
    excludePath: v.excludePath,
    heartbeatMs: v.heartbeat,
    holderPaths: v.holderPaths === true,
    runDir: v.runDir,
    drainTimeMs: v.drainTime,
    parentShutdownMs: v.parentShutdown,
    graceMs: v.grace,
    drainMode: v.drainMode,
    drainDelayMs: v.drainDelay,
    minDrainMs: v.minDrain,
    terminationDrainMs: v.terminationDrain,
    drainScope: v.drainScope ?? (gateway ? "all" : "inbound"),
    failHealthcheck: v.failHealthcheck ?? gateway,
    stopMarginMs: v.stopMargin,
    appPort: v.appPort,
    envoyArgs,
  };
  const applied = applyIstioEnvironment(options, (key) => {
    const flag = {
      drainMode: "drainMode",
      terminationDrainMs: "terminationDrain",
      minDrainMs: "minDrain",
    }[key] ?? key;
    return isDefault(flag);
  });
  if (applied.length) createEventLog(options.logFormat)("istio_environment", { applied });
  const fromIstio = (name: string) => applied.some((a) => a.startsWith(name));
  const resolved = resolveTimings(
    options,
    (key) =>
      key === "minDrainMs"
        ? !isDefault("minDrain") || fromIstio("MINIMUM_DRAIN_DURATION")
        : !isDefault("drainTime"),
  );
  checkTimings(options);
  if (resolved.length) createEventLog(options.logFormat)("timings_resolved", { resolved });
  refuseEnvoyArgClash(envoyArgs);
  return options;
}

/** `lastcall run`: supervise Envoy until terminated; resolves with the exit code. */
export async function runCommand(options: RunOptions): Promise<number> {
  const log = createEventLog(options.logFormat);
  const envoy = findEnvoy(options.envoy);
  let status: BoundServer | undefined;
  try {
    // Bound first: a kubelet probe that comes while the agent loads waits instead of being
    // refused (a refused probe costs the pod a whole probe period).
    status = await bindStatus(options.statusAddress, options.statusPort, { held: true }).catch(
      (error: Error) => {
        throw new StartError(error.message);
      },
    );
    // Loaded here, not with the command line: the other commands (a preStop's `lastcall drain`)
    // start without the agent's modules.
    const { Agent } = await import("../agent.ts");
    const agent = new Agent(options, log, envoy, status);
    const code = await agent.run();
    // The event line is for log pipelines; this one is for whoever reads the container's exit.
    if (agent.failure) writeErr(`lastcall: ${agent.failure}`);
    return code;
  } catch (error) {
    if (error instanceof StartError) {
      writeErr(`lastcall: ${error.message}`);
      for (const line of error.details) writeErr(`  ${line}`);
      return EXIT.badConfig;
    }
    throw error;
  } finally {
    await status?.close(); // the agent closes it as it ends; this is for a start that failed first
  }
}
