// Whether inject holds a pod's apps until Envoy is ready: only where the app may call out
// through Envoy at start. inject's generated config is inbound only; a user's may not be.
import { parse } from "yaml";
import { readWires } from "./envoy-wiring.ts";
import { CONFIG_KEY, type Wiring, type WiringContext } from "./inject-wiring.ts";
import { isRecord } from "./workloads.ts";

/** `--hold-app`: `auto` holds only where the Envoy config may carry the app's calls out. */
export type HoldApp = "auto" | "always" | "never";

/** The `--hold-app` values, for the CLI. */
export const HOLD_APP_CHOICES: readonly HoldApp[] = ["auto", "always", "never"];

/**
 * Why the pod's apps wait for Envoy at start, or undefined when they start at once: `never`
 * and `always` say so; `auto` holds when the config is the user's and inject cannot show it
 * is inbound only (not in the manifest, unreadable, LDS/RDS, an OUTBOUND listener, or one that
 * forwards to no loopback app port).
 *
 * @example
 * ```ts
 * holdReason("auto", { configMap: "web-lastcall-envoy", generate: true, wires }, context, undefined); // undefined
 * ```
 */
export function holdReason(
  hold: HoldApp,
  wiring: Wiring,
  context: WiringContext,
  namespace: unknown,
): string | undefined {
  if (hold === "never" || (hold === "auto" && wiring.generate)) return undefined;
  if (hold === "always") return "--hold-app always";
  const name = `ConfigMap ${wiring.configMap}`;
  const configMap = context.configMaps.get(
    `${typeof namespace === "string" ? namespace : ""}/${wiring.configMap}`,
  );
  const text = isRecord(configMap?.data) ? configMap.data[CONFIG_KEY] : undefined;
  if (typeof text !== "string") {
    return `${name} is not in this manifest, so its listeners may carry the app's calls out`;
  }
  const why = outboundIn(text);
  return why && `${name} ${why}`;
}

/** What in an Envoy config may carry an app's calls out, or undefined when it is inbound only. */
function outboundIn(text: string): string | undefined {
  let config: unknown;
  try {
    config = parse(text);
  } catch {
    return "cannot be read as YAML, so its listeners may carry the app's calls out";
  }
  const seen = readWires(config);
  if (seen.unseen.length > 0) {
    return `uses ${seen.unseen.join(", ")}, so its listeners may carry the app's calls out`;
  }
  const resources = isRecord(config) && isRecord(config.static_resources)
    ? config.static_resources
    : {};
  const listeners = Array.isArray(resources.listeners) ? resources.listeners.filter(isRecord) : [];
  const outbound = listeners.find((l) =>
    l.traffic_direction === "OUTBOUND" || l.traffic_direction === 2
  );
  if (outbound) {
    return `has the OUTBOUND listener ${
      String(outbound.name ?? "(unnamed)")
    } for the app's calls out`;
  }
  const other = seen.listeners.find((l) => l.appPorts.length === 0);
  if (other) {
    return `has the listener ${other.name}, which forwards to no app port on loopback: it may carry the app's calls out`;
  }
  return undefined;
}
