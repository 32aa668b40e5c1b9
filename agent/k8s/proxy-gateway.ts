// Envoy Gateway's proxy pod (shutdown-manager container, its preStop, Envoy's preStop), read as its
// code behaves.
import {
  argv,
  containerName,
  type ContainerSpec,
  flagValue,
  handlerArgv,
  isProgram,
  podContainers,
} from "./containers.ts";
import { earlier, goSetting, type ProxyTiming, type Setting } from "./timing.ts";
import { isRecord } from "./workloads.ts";

/** The port the shutdown manager serves: a constant in Envoy Gateway (ShutdownManagerPort). */
export const GATEWAY_SHUTDOWN_PORT = 19002;
/** The path Envoy's preStop blocks on (ShutdownManagerReadyPath). */
export const GATEWAY_READY_PATH = "/shutdown/ready";

/** Envoy Gateway's defaults for its shutdown flags (internal/cmd/envoy.go). */
export const GATEWAY_DEFAULTS = {
  drainTimeoutMs: 60_000,
  minDrainDurationMs: 10_000,
  readyTimeoutMs: 610_000,
} as const;

/** The `envoy-gateway envoy …` subcommand a command line runs: `shutdown`, `shutdown-manager`. */
function gatewayCommand(words: readonly string[]): { sub: string; args: string[] } | undefined {
  if (isProgram(words[0], "envoy-gateway") && words[1] === "envoy") {
    return { sub: words[2], args: words.slice(3) };
  }
  return undefined;
}

const preStopOf = (c: ContainerSpec) => (isRecord(c.lifecycle) ? c.lifecycle.preStop : undefined);

/**
 * Envoy Gateway's pair: the `envoy-gateway envoy shutdown-manager` container, its preStop
 * `envoy-gateway envoy shutdown`, and the Envoy container's preStop `GET :19002/shutdown/ready`.
 *
 * @example
 * ```ts
 * gatewayProxy(deployment.spec.template.spec)?.earliestStop?.what; // "--min-drain-duration 10s"
 * ```
 * @throws {RangeError} when the shutdown manager's --ready-timeout is not a Go duration
 */
export function gatewayProxy(spec: Record<string, unknown>): ProxyTiming | undefined {
  const containers = podContainers(spec).map((e) => e.container);
  const manager = containers.find((c) => gatewayCommand(argv(c))?.sub === "shutdown-manager");
  const hookOwner = containers.find((c) =>
    gatewayCommand(handlerArgv(preStopOf(c)) ?? [])?.sub === "shutdown"
  );
  if (!manager && !hookOwner) return undefined;
  const envoy = containers.find((c) => {
    const hook = preStopOf(c);
    return isRecord(hook) && isRecord(hook.httpGet) && hook.httpGet.path === GATEWAY_READY_PATH;
  });
  const managerName = containerName(manager ?? hookOwner!);
  const problems: string[] = [];

  const readyTimeout = goSetting(
    "--ready-timeout",
    flagValue(manager ? gatewayCommand(argv(manager))!.args : [], "--ready-timeout"),
    GATEWAY_DEFAULTS.readyTimeoutMs,
    "envoy-gateway envoy shutdown-manager --ready-timeout",
  );
  const shutdownArgs = hookOwner ? gatewayCommand(handlerArgv(preStopOf(hookOwner))!)!.args : [];
  let hooked = envoy !== undefined && hookOwner !== undefined && manager !== undefined;
  // A flag that is not a Go duration makes the command fail before it drains anything.
  const flag = (name: string, fallbackMs: number) => {
    try {
      return goSetting(
        name,
        flagValue(shutdownArgs, name),
        fallbackMs,
        `envoy-gateway envoy shutdown ${name}`,
      );
    } catch (error) {
      hooked = false;
      problems.push(
        `${containerName(hookOwner!)}: \`envoy-gateway envoy shutdown\` refuses ${
          (error as Error).message
        }: its preStop fails at once, so Envoy is not drained and its preStop GET ${GATEWAY_READY_PATH} blocks for ${readyTimeout.what}${
          readyTimeout.isDefault ? " (default)" : ""
        }`,
      );
      return goSetting(name, undefined, fallbackMs, `envoy-gateway envoy shutdown ${name}`);
    }
  };
  const drainTimeout = flag("--drain-timeout", GATEWAY_DEFAULTS.drainTimeoutMs);
  const minDrain = flag("--min-drain-duration", GATEWAY_DEFAULTS.minDrainDurationMs);
  if (!manager) {
    problems.push(
      `${managerName}: no container runs \`envoy-gateway envoy shutdown-manager\`: nothing serves :${GATEWAY_SHUTDOWN_PORT}${GATEWAY_READY_PATH}, so Envoy's preStop fails at once and Envoy exits without draining; add Envoy Gateway's shutdown-manager container`,
    );
  }
  if (!envoy) {
    problems.push(
      `${managerName}: no container's preStop calls GET :${GATEWAY_SHUTDOWN_PORT}${GATEWAY_READY_PATH}: Envoy gets SIGTERM at once and exits without draining; add lifecycle.preStop.httpGet {path: ${GATEWAY_READY_PATH}, port: ${GATEWAY_SHUTDOWN_PORT}} to the Envoy container`,
    );
  } else {
    const hookPort = (preStopOf(envoy) as { httpGet: { port?: unknown } }).httpGet.port;
    const port = portNumber(hookPort, envoy);
    if (port !== GATEWAY_SHUTDOWN_PORT) {
      hooked = false;
      problems.push(
        `${containerName(envoy)}: preStop GET ${GATEWAY_READY_PATH} goes to port ${
          String(hookPort)
        }, but Envoy Gateway's shutdown manager always serves ${GATEWAY_SHUTDOWN_PORT}: the hook fails at once and Envoy exits without draining; use port ${GATEWAY_SHUTDOWN_PORT}`,
      );
    }
  }
  if (manager && !hookOwner) {
    problems.push(
      `${managerName}: no preStop runs \`envoy-gateway envoy shutdown\`: nothing drains Envoy or writes /tmp/shutdown-ready, so Envoy's preStop GET ${GATEWAY_READY_PATH} blocks for ${readyTimeout.what}${
        readyTimeout.isDefault ? " (default)" : ""
      } and Envoy stops without a drain; add lifecycle.preStop.exec.command: [envoy-gateway, envoy, shutdown] to ${managerName}`,
    );
  }
  if (manager && hookOwner && hookOwner !== manager && !sharesMount(manager, hookOwner, "/tmp")) {
    hooked = false;
    problems.push(
      `${
        containerName(hookOwner)
      }: its preStop \`envoy-gateway envoy shutdown\` writes /tmp/shutdown-ready in its own filesystem, where ${managerName} never sees it: Envoy's preStop GET ${GATEWAY_READY_PATH} blocks for ${readyTimeout.what}${
        readyTimeout.isDefault ? " (default)" : ""
      }; move that preStop to ${managerName}`,
    );
  }
  if (hooked && readyTimeout.ms <= drainTimeout.ms) {
    problems.push(
      `${managerName} ${readyTimeout.what}${
        readyTimeout.isDefault ? " (default)" : ""
      } is not longer than ${drainTimeout.what}${
        drainTimeout.isDefault ? " (default)" : ""
      }: Envoy's preStop gives up first and Envoy gets SIGTERM while connections still drain; set ${readyTimeout.knob} ≥ ${
        Math.ceil(drainTimeout.ms / 1000) + 10
      }s (--drain-timeout + 10s, as Envoy Gateway writes it)`,
    );
  }

  // The drain ends at the first poll past --min-drain-duration that finds few enough
  // connections (none open: at once), or past --drain-timeout; Envoy's preStop gives up at
  // --ready-timeout whatever the drain does.
  const earliest: Setting = earlier(earlier(minDrain, drainTimeout), readyTimeout);
  const deadline: Setting = earlier(drainTimeout, readyTimeout);
  const name = envoy ? containerName(envoy) : managerName;
  return {
    container: name,
    members: [...new Set([name, managerName])],
    tool: "envoy-gateway",
    native: false,
    // Without the pair of hooks in place, Envoy's timing is the problem already reported.
    earliestStop: hooked ? earliest : undefined,
    deadline: hooked ? deadline : undefined,
    problems,
  };
}

/** A hook's port as a number: a number, a numeric string, or the name of one of the container's ports. */
function portNumber(port: unknown, c: ContainerSpec): number | undefined {
  if (typeof port === "number") return port;
  if (typeof port !== "string") return undefined;
  if (/^\d+$/.test(port)) return Number(port);
  const named = Array.isArray(c.ports)
    ? c.ports.find((p) => isRecord(p) && p.name === port)
    : undefined;
  return isRecord(named) && typeof named.containerPort === "number"
    ? named.containerPort
    : undefined;
}

/** The volume two containers both mount at `path`, if any. */
function sharesMount(a: ContainerSpec, b: ContainerSpec, path: string): boolean {
  const at = (
    c: ContainerSpec,
  ) => (Array.isArray(c.volumeMounts)
    ? c.volumeMounts.filter(isRecord).find((m) => m.mountPath === path)?.name
    : undefined);
  return at(a) !== undefined && at(a) === at(b);
}
