// Istio's pilot-agent, read from the pod: see docs/migration.md for what each setting does.
import YAML from "yaml";
import { envValue, podContainers } from "./containers.ts";
import { formatFlagDuration, isNative, type ProxyTiming, secondsText, setting } from "./timing.ts";
import { isRecord } from "./workloads.ts";

/**
 * Istio's pilot-agent: an `istio-proxy` container, or a pod marked for injection. Settings
 * come from the `proxy.istio.io/config` annotation, then the container's environment (or the
 * annotation's proxyMetadata), then Istio's defaults; mesh-wide defaults are not visible here.
 */
export function istioProxy(spec: Record<string, unknown>, annotations: Record<string, unknown>): ProxyTiming | undefined {
  const entry = podContainers(spec).find((e) => e.container.name === "istio-proxy");
  const marked = annotations["sidecar.istio.io/inject"] === "true" || annotations["proxy.istio.io/config"] !== undefined;
  if (!entry && (!marked || annotations["sidecar.istio.io/inject"] === "false")) return undefined;
  const container = entry?.container ?? {};
  // The injector writes the effective ProxyConfig as JSON into PROXY_CONFIG; the annotation is
  // what people write.
  const config = { ...proxyConfig("PROXY_CONFIG", envValue(container, "PROXY_CONFIG")), ...proxyConfig("proxy.istio.io/config", annotations["proxy.istio.io/config"]) };
  const metadata = isRecord(config.proxyMetadata) ? config.proxyMetadata : {};
  const env = (name: string) => envValue(container, name) ?? (metadata[name] === undefined ? undefined : String(metadata[name]));
  const annotation = (key: string, fallbackMs: number) => {
    const value = config[key] === undefined ? undefined : String(config[key]);
    return setting(key, value, fallbackMs, `proxy.istio.io/config ${key}`);
  };
  let terminationDrain = annotation("terminationDrainDuration", 5000);
  if (terminationDrain.isDefault) {
    for (const name of ["TERMINATION_DRAIN_DURATION_SECONDS", "TERMINATION_DRAIN_DURATION"]) {
      const value = env(name);
      if (value !== undefined) {
        terminationDrain = setting(name, value, 0, name, name.endsWith("_SECONDS") ? secondsText : formatFlagDuration);
        break;
      }
    }
  }
  const drainDuration = annotation("drainDuration", 45_000);
  const minDrain = setting("MINIMUM_DRAIN_DURATION", env("MINIMUM_DRAIN_DURATION"), 5000);
  const exitOnZero = /^(1|true)$/i.test(env("EXIT_ON_ZERO_ACTIVE_CONNECTIONS") ?? "");
  const parentShutdown = config.parentShutdownDuration === undefined ? undefined : annotation("parentShutdownDuration", 60_000);
  const native = entry !== undefined && isNative(entry.container, entry.init);
  // Envoy keeps taking connections for drainDuration (its --drain-time-s) unless pilot-agent
  // kills it sooner: after terminationDrainDuration, or once connections reach zero after
  // MINIMUM_DRAIN_DURATION.
  const killedAt = exitOnZero ? minDrain : terminationDrain;
  return {
    container: "istio-proxy",
    members: ["istio-proxy"],
    tool: "istio",
    native,
    earliestStop: native ? undefined : killedAt,
    listen: native ? undefined : drainDuration,
    stop: native ? undefined : exitOnZero ? parentShutdown : terminationDrain,
    deadline: exitOnZero ? parentShutdown : terminationDrain,
    afterApp: native ? killedAt : undefined,
    problems: [],
  };
}

/** A ProxyConfig written as YAML or JSON; empty when absent. */
function proxyConfig(source: string, raw: unknown): Record<string, unknown> {
  if (typeof raw !== "string") return {};
  try {
    const parsed = YAML.parse(raw, { merge: true });
    return isRecord(parsed) ? parsed : {};
  } catch (error) {
    throw new RangeError(`${source} is not YAML: ${(error as Error).message.split("\n")[0].replace(/ at line \d+, column \d+:?$/, "")}`);
  }
}

