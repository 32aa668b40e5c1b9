// Istio's pilot-agent sidecar, regular or native, read from the pod as its code behaves.
import YAML from "yaml";
import {
  containerName,
  type ContainerSpec,
  envValue,
  flagValue,
  handlerArgv,
  isProgram,
  podContainers,
} from "./containers.ts";
import {
  formatFlagDuration,
  goDurationMs,
  isNative,
  type ProxyTiming,
  secondsText,
  type Setting,
  setting,
} from "./timing.ts";
import { isRecord } from "./workloads.ts";

/** pilot-agent polls Envoy's open connections this often once MINIMUM_DRAIN_DURATION is over (agent.go). */
const CONNECTION_POLL_MS = 1000;
/** Go's strconv.ParseBool. */
const GO_TRUE = ["1", "t", "T", "TRUE", "true", "True"];
const GO_FALSE = ["0", "f", "F", "FALSE", "false", "False"];

/**
 * Istio's pilot-agent: an `istio-proxy` container, or a pod marked for injection. Settings
 * come from the `proxy.istio.io/config` annotation, then the container's environment (or the
 * annotation's proxyMetadata), then Istio's defaults; mesh-wide defaults are not visible here.
 * A pod only marked for injection is read in the layout `sidecar.istio.io/nativeSidecar` asks
 * for, the older one when it says nothing.
 *
 * @example
 * ```ts
 * istioProxy({ containers: [{ name: "app" }, { name: "istio-proxy" }] }, {})?.stop?.what;
 * // "terminationDrainDuration 5s"
 * ```
 */
export function istioProxy(
  spec: Record<string, unknown>,
  annotations: Record<string, unknown>,
  servesRequests = true,
): ProxyTiming | undefined {
  const entry = podContainers(spec).find((e) => e.container.name === "istio-proxy");
  const marked = annotations["sidecar.istio.io/inject"] === "true" ||
    annotations["proxy.istio.io/config"] !== undefined;
  if (!entry && (!marked || annotations["sidecar.istio.io/inject"] === "false")) return undefined;
  const container = entry?.container ?? {};
  const name = "istio-proxy";
  const problems: string[] = [];
  // The injector writes the effective ProxyConfig as JSON into PROXY_CONFIG; the annotation is
  // what people write, and pilot-agent reads it again at start.
  const config = {
    ...proxyConfig("PROXY_CONFIG", envValue(container, "PROXY_CONFIG")),
    ...proxyConfig("proxy.istio.io/config", annotations["proxy.istio.io/config"]),
  };
  const metadata = isRecord(config.proxyMetadata) ? config.proxyMetadata : {};
  // pilot-agent reads these from its environment, where the injector writes proxyMetadata.
  const env = (key: string) =>
    envValue(container, key) ?? (metadata[key] === undefined ? undefined : String(metadata[key]));
  const annotation = (key: string, fallbackMs: number) => {
    const value = config[key] === undefined ? undefined : String(config[key]);
    return setting(key, value, fallbackMs, `proxy.istio.io/config ${key}`);
  };
  let terminationDrain = annotation("terminationDrainDuration", 5000);
  if (terminationDrain.isDefault) {
    for (const key of ["TERMINATION_DRAIN_DURATION_SECONDS", "TERMINATION_DRAIN_DURATION"]) {
      const value = env(key);
      if (value !== undefined) {
        terminationDrain = setting(
          key,
          value,
          0,
          key,
          key.endsWith("_SECONDS") ? secondsText : formatFlagDuration,
        );
        break;
      }
    }
  }
  const drainDuration = annotation("drainDuration", 45_000);
  const minDrain = goEnv("MINIMUM_DRAIN_DURATION", env("MINIMUM_DRAIN_DURATION"), 5000, problems);
  const exitOnZero = goBool(
    "EXIT_ON_ZERO_ACTIVE_CONNECTIONS",
    env("EXIT_ON_ZERO_ACTIVE_CONNECTIONS"),
    problems,
  );
  const native = entry
    ? isNative(entry.container, entry.init)
    : annotations["sidecar.istio.io/nativeSidecar"] === "true";
  const statusPort = String(annotations["status.sidecar.istio.io/port"] ?? 15020);
  const hook = native && entry ? drainHook(entry.container, statusPort) : "drains";

  // With EXIT_ON_ZERO, the first poll comes a second after MINIMUM_DRAIN_DURATION.
  const firstPoll: Setting = {
    ...minDrain,
    ms: minDrain.ms + CONNECTION_POLL_MS,
    what: `${minDrain.what}${minDrain.isDefault ? " (default)" : ""} + the 1s poll`,
    isDefault: false,
    offsetMs: CONNECTION_POLL_MS,
  };
  const killedAt = exitOnZero ? firstPoll : terminationDrain;
  const terminates = !native || hook !== "drains";
  if (terminates && exitOnZero && !terminationDrain.isDefault) {
    problems.push(
      `${name} ${terminationDrain.what} has no effect with EXIT_ON_ZERO_ACTIVE_CONNECTIONS: pilot-agent waits ${minDrain.what}${
        minDrain.isDefault ? " (default)" : ""
      }, then kills Envoy at the first poll that finds no connection open (istio issue 44690); set MINIMUM_DRAIN_DURATION instead`,
    );
  }
  if (native) {
    if (hook !== "drains" && servesRequests) {
      problems.push(hook === "none" ? noDrainHook(name, statusPort) : hook);
    }
    // With the hook, the SIGTERM after the app's exit ends Envoy at once (the drain is done).
    return {
      container: name,
      members: [name],
      tool: "istio",
      native,
      afterApp: hook === "drains" ? undefined : killedAt,
      problems,
    };
  }
  return {
    container: name,
    members: [name],
    tool: "istio",
    native,
    earliestStop: killedAt,
    // terminate() drains without skip_exit: the inbound listeners close after drainDuration.
    listen: drainDuration,
    stop: exitOnZero ? undefined : terminationDrain,
    idleStop: exitOnZero ? firstPoll : undefined,
    deadline: killedAt,
    problems,
  };
}

/** How a native istio-proxy's preStop starts its drain: `drains`, `none`, or a finding. */
function drainHook(c: ContainerSpec, statusPort: string): "drains" | "none" | string {
  const words = handlerArgv(isRecord(c.lifecycle) ? c.lifecycle.preStop : undefined) ?? [];
  if (isProgram(words[0], "pilot-agent") && words[1] === "request") {
    const args = words.slice(2);
    const positional = args.filter((w, i) =>
      !w.startsWith("-") && !(args[i - 1] === "--debug-port")
    );
    if (positional[0]?.toUpperCase() !== "POST" || positional[1]?.replace(/^\//, "") !== "drain") {
      return "none";
    }
    // pilot-agent request goes to Envoy's admin port unless told otherwise; /drain is pilot-agent's.
    const port = flagValue(args, "--debug-port") ?? "15000";
    if (port === statusPort) return "drains";
    return `${containerName(c)}'s preStop \`pilot-agent request POST drain\` goes to port ${port}${
      port === "15000" ? " (--debug-port's default, Envoy's admin)" : ""
    }, where nothing serves /drain: the hook fails and the proxy starts draining only after the app has exited; add --debug-port=${statusPort}`;
  }
  return words.some((w) => /:\d+\/drain\/?$/.test(w)) && words.some((w) => /post/i.test(w))
    ? "drains"
    : "none";
}

/** The finding for a native istio-proxy whose preStop does not drain it. */
function noDrainHook(name: string, statusPort: string): string {
  return `${name} is a native sidecar without a preStop drain: it starts draining only after the app has exited, so keep-alive clients keep sending requests the stopping app cannot answer; add lifecycle.preStop.exec.command: [pilot-agent, request, --debug-port=${statusPort}, POST, drain] (as Istio's injector writes it)`;
}

/** A duration variable as pilot-agent reads it: a Go duration, or its default (with a finding). */
function goEnv(
  name: string,
  value: string | undefined,
  fallbackMs: number,
  problems: string[],
): Setting {
  const ms = value === undefined ? undefined : goDurationMs(value);
  if (value !== undefined && ms !== undefined) {
    return {
      ...setting(name, undefined, fallbackMs),
      ms,
      what: `${name} ${formatFlagDuration(ms)}`,
      isDefault: false,
    };
  }
  if (value !== undefined) {
    problems.push(
      `istio-proxy: ${name} "${value}" is not a Go duration: pilot-agent ignores it and uses ${
        formatFlagDuration(fallbackMs)
      }; write it with a unit (${/^\d+$/.test(value) ? `${value}s` : "e.g. 10s"})`,
    );
  }
  return setting(name, undefined, fallbackMs);
}

/** A boolean variable as pilot-agent reads it (Go's ParseBool), false when absent or unreadable. */
function goBool(name: string, value: string | undefined, problems: string[]): boolean {
  if (value === undefined || GO_FALSE.includes(value)) return false;
  if (GO_TRUE.includes(value)) return true;
  problems.push(
    `istio-proxy: ${name} "${value}" is not a Go boolean: pilot-agent ignores it (false); write "true" or "false"`,
  );
  return false;
}

/** A ProxyConfig written as YAML or JSON; empty when absent. */
function proxyConfig(source: string, raw: unknown): Record<string, unknown> {
  if (typeof raw !== "string") return {};
  try {
    const parsed = YAML.parse(raw, { merge: true });
    return isRecord(parsed) ? parsed : {};
  } catch (error) {
    throw new RangeError(
      `${source} is not YAML: ${
        (error as Error).message.split("\n")[0].replace(/ at line \d+, column \d+:?$/, "")
      }`,
    );
  }
}
