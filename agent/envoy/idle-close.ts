// Closing the idle client connections of an old epoch, which Envoy's drain leaves open (it only
// answers their next request with `Connection: close`, however late it comes): a pressure file
// per epoch, read by Envoy's overload manager, scales the idle timeout of connections to zero.
import { rename, writeFile } from "node:fs/promises";
import { readTcpTable, socketInodes, TCP_STATE } from "./sockets.ts";

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/** The resource monitor that reads a pressure (0 to 1) from a file. */
export const PRESSURE_MONITOR = "envoy.resource_monitors.injected_resource";
/** The overload action that shortens Envoy's timers under pressure. */
export const REDUCE_TIMEOUTS = "envoy.overload_actions.reduce_timeouts";

/**
 * Adds to `config` (in place) an overload manager that closes every idle client connection
 * (HTTP/1.1 between requests, HTTP/2 with no stream) once `pressureFile` reads 1. Returns why it
 * could not, when the config's own overload manager already uses the monitor or the action.
 *
 * @example
 * ```ts
 * addIdleClose(config, "/run/lastcall/envoy-g1-epoch0.idle"); // undefined: added
 * ```
 */
export function addIdleClose(config: Json, pressureFile: string): string | undefined {
  const own = isObject(config.overload_manager) ? config.overload_manager : undefined;
  const monitors = Array.isArray(own?.resource_monitors) ? own.resource_monitors as Json[] : [];
  const actions = Array.isArray(own?.actions) ? own.actions as Json[] : [];
  const ours = new Set([PRESSURE_MONITOR, REDUCE_TIMEOUTS]);
  const taken = [...monitors, ...actions].find((m) => ours.has(String(m.name)));
  if (taken) return `the config's overload_manager already has ${String(taken.name)}`;
  config.overload_manager = {
    // Envoy's default is 1 s: an old epoch's idle connections then close within 0.1 s.
    ...(own ?? { refresh_interval: "0.1s" }),
    resource_monitors: [...monitors, {
      name: PRESSURE_MONITOR,
      typed_config: {
        "@type":
          "type.googleapis.com/envoy.extensions.resource_monitors.injected_resource.v3.InjectedResourceConfig",
        filename: pressureFile,
      },
    }],
    actions: [...actions, {
      name: REDUCE_TIMEOUTS,
      triggers: [{
        name: PRESSURE_MONITOR,
        scaled: { scaling_threshold: 0.5, saturation_threshold: 0.9 },
      }],
      typed_config: {
        "@type": "type.googleapis.com/envoy.config.overload.v3.ScaleTimersOverloadActionConfig",
        timer_scale_factors: [{ timer: "HTTP_DOWNSTREAM_CONNECTION_IDLE", min_timeout: "0s" }],
      },
    }],
  };
  return undefined;
}

/**
 * Writes `pressure` (0: serve as configured, 1: close idle connections) to an epoch's pressure
 * file. Envoy sees a file moved into place, not one written over: it is renamed there.
 *
 * @example
 * ```ts
 * await setIdlePressure("/run/lastcall/envoy-g1-epoch0.idle", 1);
 * ```
 */
export async function setIdlePressure(pressureFile: string, pressure: 0 | 1): Promise<void> {
  const next = `${pressureFile}.next`;
  await writeFile(next, String(pressure), { mode: 0o600 });
  await rename(next, pressureFile);
}

/**
 * Whether process `pid` still holds a listening TCP socket: a hot-restart parent closes its own
 * once its child has taken them over. Until then it may accept a connection, which an idle
 * timeout of zero would close before its first request arrives. Undefined where /proc cannot tell.
 *
 * @example
 * ```ts
 * await stillListening(parent.pid); // false once the child took the listeners over
 * ```
 */
export async function stillListening(pid: number, proc = "/proc"): Promise<boolean | undefined> {
  const [inodes, table] = await Promise.all([socketInodes(pid, proc), readTcpTable(proc)]);
  if (!inodes || !table) return undefined;
  return table.some((s) => s.state === TCP_STATE.listen && inodes.has(s.inode));
}
