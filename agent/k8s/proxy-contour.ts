// Contour's shutdown-manager pair (or lastcall's drop-in for it), read from the pod.
import {
  argv,
  containerName,
  type ContainerSpec,
  flagValue,
  handlerArgv,
  isProgram,
  podContainers,
} from "./containers.ts";
import { type ProxyTiming, type Setting, setting } from "./timing.ts";
import { isRecord } from "./workloads.ts";

/** Contour's defaults for its `shutdown` flags (cmd/contour/shutdownmanager.go), as `lastcall shutdown` keeps them. */
export const CONTOUR_DEFAULTS = {
  drainDelayMs: 0,
  checkDelayMs: 0,
  checkIntervalMs: 5000,
} as const;

/** The Contour subcommand a command line runs: `contour envoy shutdown` → `shutdown`. */
function contourCommand(
  words: readonly string[],
): { program: string; sub: string; args: string[] } | undefined {
  if (isProgram(words[0], "contour") && words[1] === "envoy") {
    return { program: "contour envoy", sub: words[2], args: words.slice(3) };
  }
  if (isProgram(words[0], "lastcall")) {
    return { program: "lastcall", sub: words[1], args: words.slice(2) };
  }
  return undefined;
}

/**
 * Contour's pair: a `shutdown-manager` container serving `/shutdown`, its preStop running
 * `shutdown` (fail Envoy's health check, wait, poll open connections), and the Envoy
 * container's preStop `GET :8090/shutdown`, which holds Envoy's SIGTERM until the drain ends.
 */
export function contourProxy(spec: Record<string, unknown>): ProxyTiming | undefined {
  const containers = podContainers(spec).map((e) => e.container);
  const manager = containers.find((c) => contourCommand(argv(c))?.sub === "shutdown-manager");
  if (!manager) return undefined;
  const managerArgs = contourCommand(argv(manager))!.args;
  const port = Number(flagValue(managerArgs, "--serve-port") ?? 8090);
  const problems: string[] = [];
  const preStop = (c: ContainerSpec) => (isRecord(c.lifecycle) ? c.lifecycle.preStop : undefined);
  const shutdownHook = containers.map((c) => contourCommand(handlerArgv(preStop(c)) ?? [])).find((
    cmd,
  ) => cmd?.sub === "shutdown");
  const envoy = containers.find((c) => {
    const hook = preStop(c);
    return isRecord(hook) && isRecord(hook.httpGet) && hook.httpGet.path === "/shutdown";
  });
  const managerName = containerName(manager);
  let hooked = envoy !== undefined && shutdownHook !== undefined;
  if (!envoy) {
    problems.push(
      `${managerName}: no container's preStop calls GET :${port}/shutdown: Envoy gets SIGTERM at once and exits without draining; add lifecycle.preStop.httpGet {path: /shutdown, port: ${port}} to the Envoy container`,
    );
  } else {
    const hookPort = (preStop(envoy) as { httpGet: { port?: unknown } }).httpGet.port;
    if (Number(hookPort) !== port) {
      hooked = false;
      problems.push(
        `${containerName(envoy)}: preStop GET /shutdown goes to port ${
          String(hookPort)
        }, but ${managerName} serves --serve-port ${port}: the hook fails at once and Envoy exits without draining; use port ${port}`,
      );
    }
  }
  if (!shutdownHook) {
    problems.push(
      `${managerName}: no preStop runs \`shutdown\`: nobody writes the ready file, so Envoy's preStop GET /shutdown blocks until the kubelet kills the pod; add lifecycle.preStop.exec.command: [/bin/contour, envoy, shutdown] to ${managerName}`,
    );
  }
  const flags = shutdownHook?.args ?? [];
  const prefix = `${shutdownHook?.program ?? "contour envoy"} shutdown`;
  const flag = (name: string, fallbackMs: number) =>
    setting(name, flagValue(flags, name), fallbackMs, `${prefix} ${name}`);
  const drainDelay = flag("--drain-delay", CONTOUR_DEFAULTS.drainDelayMs);
  const checkDelay = flag("--check-delay", CONTOUR_DEFAULTS.checkDelayMs);
  const checkInterval = flag("--check-interval", CONTOUR_DEFAULTS.checkIntervalMs);
  // Contour's order: --drain-delay (Envoy healthy, serving), fail the health check,
  // --check-delay, first check. --drain-delay is the knob that keeps Envoy serving while the
  // endpoints are removed, so the fixes name it.
  const firstCheck: Setting = {
    ...drainDelay,
    ms: drainDelay.ms + checkDelay.ms,
    what: `${prefix} ${drainDelay.what}${checkDelay.ms ? ` + ${checkDelay.what}` : ""}`,
    isDefault: drainDelay.isDefault && checkDelay.isDefault,
    offsetMs: checkDelay.ms,
  };
  const secondCheck: Setting = {
    ...checkInterval,
    ms: firstCheck.ms + checkInterval.ms,
    what: `${firstCheck.what} + ${checkInterval.what}`,
    isDefault: firstCheck.isDefault && checkInterval.isDefault,
    offsetMs: firstCheck.ms,
  };
  const name = envoy ? containerName(envoy) : managerName;
  // Envoy under `lastcall run` (Contour's pod with lastcall's image swapped in): the drain does
  // not end at a check. On SIGTERM, or from the preStop on when `lastcall shutdown` starts its
  // drain, lastcall keeps Envoy taking requests for --min-drain and until nothing is in flight:
  // that container's own timings, read as a lastcall proxy, are the ones that hold.
  if (envoy && isProgram(argv(envoy)[0], "lastcall") && argv(envoy)[1] === "run") {
    return {
      container: name,
      members: [...new Set([name, managerName])],
      tool: "contour",
      native: false,
      problems,
    };
  }
  return {
    container: name,
    members: [...new Set([name, managerName])],
    tool: "contour",
    native: false,
    // With no connection open, the first check ends the drain and Envoy gets SIGTERM.
    // Without the pair of hooks in place, Envoy's timing is the problem already reported.
    earliestStop: hooked ? firstCheck : undefined,
    deadline: hooked ? secondCheck : undefined,
    problems,
  };
}
