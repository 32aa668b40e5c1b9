// lastcall's own sidecar: `lastcall run` flags, then LASTCALL_* variables, then the Istio
// variables lastcall honours (commands/run.ts), then lastcall's defaults.
import { isDrainHook } from "../drain/hook.ts";
import { RUN_DEFAULTS } from "../options.ts";
import {
  argv,
  containerName,
  type ContainerSpec,
  envValue,
  flagValue,
  handlerArgv,
  handlerCommand,
  isProgram,
} from "./containers.ts";
import { earlier, isNative, later, type ProxyTiming, type Setting, setting } from "./timing.ts";
import { isRecord } from "./workloads.ts";

/** The command lastcall runs in this container, without the program name; undefined if none. */
export function lastcallArgs(c: ContainerSpec): string[] | undefined {
  const words = argv(c);
  if (isProgram(words[0], "lastcall")) return words.slice(1);
  const image = typeof c.image === "string" ? c.image : "";
  if (c.command !== undefined || !/(^|\/)lastcall([:@]|$)/.test(image)) return undefined;
  // The image's default command (Dockerfile CMD).
  return words.length
    ? words
    : ["run", "--config", "/etc/envoy/envoy.yaml", "--status-address", "0.0.0.0"];
}

/** `lastcall run`, with flags, then LASTCALL_* variables, then Istio's variables, then defaults. */
export function lastcallProxy(
  c: ContainerSpec,
  init: boolean,
  servesRequests: boolean,
): ProxyTiming | undefined {
  const args = lastcallArgs(c);
  if (!args || args[0] !== "run") return undefined;
  const name = containerName(c);
  const envName = (flag: string) => `LASTCALL_${flag.slice(2).replace(/-/g, "_").toUpperCase()}`;
  const own = (flag: string) => flagValue(args, flag) ?? envValue(c, envName(flag));
  // Named after where the value is written: the flag, else its variable.
  const get = (flag: string, fallbackMs: number) => {
    const name = flagValue(args, flag) === undefined && envValue(c, envName(flag)) !== undefined
      ? envName(flag)
      : flag;
    return setting(name, own(flag), fallbackMs);
  };
  const grace = get("--grace", RUN_DEFAULTS.graceMs);
  const drainDelay = get("--drain-delay", RUN_DEFAULTS.drainDelayMs);
  const drainTime = get("--drain-time", RUN_DEFAULTS.drainTimeMs);
  const stopMargin = get("--stop-margin", RUN_DEFAULTS.stopMarginMs);
  // Istio's variables apply where no lastcall flag or variable is given (commands/run.ts).
  const minDrain =
    own("--min-drain") === undefined && envValue(c, "MINIMUM_DRAIN_DURATION") !== undefined
      ? setting("MINIMUM_DRAIN_DURATION", envValue(c, "MINIMUM_DRAIN_DURATION"), 0)
      : get("--min-drain", RUN_DEFAULTS.minDrainMs);
  const istioSleep = envValue(c, "TERMINATION_DRAIN_DURATION") ??
    envValue(c, "TERMINATION_DRAIN_DURATION_SECONDS");
  const terminationDrain = own("--termination-drain") === undefined && istioSleep !== undefined
    ? setting("TERMINATION_DRAIN_DURATION", istioSleep, 0)
    : get("--termination-drain", RUN_DEFAULTS.terminationDrainMs);
  let mode = own("--drain-mode") ?? "inflight";
  if (own("--drain-mode") === undefined) {
    if (/^(1|true)$/i.test(envValue(c, "EXIT_ON_ZERO_ACTIVE_CONNECTIONS") ?? "")) {
      mode = "connections";
    }
    if (
      own("--termination-drain") === undefined && istioSleep !== undefined && mode === "inflight"
    ) mode = "sleep";
  }
  const native = isNative(c, init);
  const problems: string[] = [];
  const drainsEarly = !native || drainsAtPreStop(c);
  if (!drainsEarly && servesRequests) {
    problems.push(
      `${name} is a native sidecar without a preStop \`lastcall drain\`: it starts draining only after the app has exited, so keep-alive clients keep sending requests the stopping app cannot answer; add lifecycle.preStop.exec.command: [lastcall, drain]`,
    );
  }
  // Envoy takes new connections until `--drain-time` after the listeners start draining, and
  // lastcall never stops it before `--min-drain` (or, in sleep mode, the sleep).
  const listening: Setting = {
    ...drainTime,
    ms: drainDelay.ms + drainTime.ms,
    what: drainDelay.ms ? `${drainDelay.what} + ${drainTime.what}` : drainTime.what,
    offsetMs: drainDelay.ms,
  };
  const sleepEnd: Setting = {
    ...terminationDrain,
    ms: drainDelay.ms + terminationDrain.ms,
    offsetMs: drainDelay.ms,
  };
  const earliestStop = mode === "sleep" ? later(minDrain, sleepEnd) : minDrain;
  const graceStop: Setting = {
    ...grace,
    ms: grace.ms - stopMargin.ms,
    what: `${grace.what} − ${stopMargin.what}`,
    isDefault: grace.isDefault && stopMargin.isDefault,
    offsetMs: -stopMargin.ms,
  };
  return {
    container: name,
    members: [name],
    tool: "lastcall",
    native,
    earliestStop: drainsEarly ? earliestStop : undefined,
    listen: drainsEarly ? listening : undefined,
    stop: native ? undefined : mode === "sleep" ? earlier(earliestStop, graceStop) : graceStop,
    deadline: grace,
    statusPort: Number(own("--status-port") ?? 15020),
    problems,
  };
}

/** Whether the container's preStop asks lastcall to drain (inject's hook, or a POST to /drain). */
function drainsAtPreStop(c: ContainerSpec): boolean {
  const preStop = isRecord(c.lifecycle) ? c.lifecycle.preStop : undefined;
  const words = handlerArgv(preStop) ?? []; // a shell line's words
  return isDrainHook(handlerCommand(preStop) ?? []) || isDrainHook(words) ||
    words.some((w) => /\/drain\/?$/.test(w));
}
