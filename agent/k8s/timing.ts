// The vocabulary of the timing checks: a proxy's termination timeline as settings that each
// know where they were read from and which knob changes them.
import {
  DurationTooLongError,
  formatDuration,
  MAX_DURATION_TEXT,
  parseAnyDuration,
  parseGoDuration,
} from "../lib/duration.ts";
import type { ContainerSpec } from "./containers.ts";

/** One timing of a proxy, with the knob that changes it. */
export interface Setting {
  /** Milliseconds after the pod starts terminating (or after the proxy's SIGTERM, for `afterApp`). */
  ms: number;
  /** How a finding names it: `terminationDrainDuration 5s`, `--grace 30s − --stop-margin 2s`. */
  what: string;
  /** Not written anywhere: the tool's default. */
  isDefault: boolean;
  /** What to set to change it: `proxy.istio.io/config terminationDrainDuration`, `--min-drain`. */
  knob: string;
  /** The knob's value is `ms − offsetMs` (e.g. `--check-delay` after `--drain-delay`). */
  offsetMs: number;
  /** Writes a knob value the way the knob is spelt (`35s`, or `35` for a `_SECONDS` variable). */
  format: (ms: number) => string;
}

/** A proxy's termination timeline, as far as the manifest tells. */
export interface ProxyTiming {
  /** Container named in findings: `istio-proxy`, `lastcall`, `envoy`. */
  container: string;
  /** Containers that belong to the proxy, not the app. */
  members: string[];
  /** Which tool stops it. */
  tool: "lastcall" | "istio" | "contour" | "envoy-gateway" | "other";
  /** A native sidecar: SIGTERM comes only after every app container has exited. */
  native: boolean;
  /** It is stopped no sooner than this; undefined when not known (a native sidecar waits for the app). */
  earliestStop?: Setting;
  /** Its listeners stop taking connections then, even if it runs on (Envoy's drain time). */
  listen?: Setting;
  /** It is stopped by then whatever the app still does; undefined when it waits for the app. */
  stop?: Setting;
  /**
   * From then on it stops as soon as no connection is open, whatever the app still does (Istio's
   * `EXIT_ON_ZERO_ACTIVE_CONNECTIONS`): an app idle for a moment loses its proxy.
   */
  idleStop?: Setting;
  /** Its own deadline, which must fit in the pod's grace period. */
  deadline?: Setting;
  /** Native sidecars: how long it still runs after its SIGTERM (after the app's exit). */
  afterApp?: Setting;
  /** lastcall's status server port, which answers the apps' preStop `GET /v1/app-stop`. */
  statusPort?: number;
  /** Whole findings about its set-up (a missing hook, an unreadable value). */
  problems: string[];
  /** A proxy whose termination is not modelled (Linkerd's, Consul's, Kuma's): what it is. */
  unmodelled?: string;
}

/** Whole seconds, for knobs such as `TERMINATION_DRAIN_DURATION_SECONDS`. */
export const secondsText = (ms: number) => `${Math.ceil(ms / 1000)}`;
/** `1.5s`, `2m`; zero as `0s`, the way people write it in flags. */
export const formatFlagDuration = (ms: number) => (ms === 0 ? "0s" : formatDuration(ms));

/** A setting read from `value`, or `fallback` (a default, in ms) when absent. */
export function setting(
  name: string,
  value: string | undefined,
  fallback: number,
  knob = name,
  format = formatFlagDuration,
): Setting {
  if (value === undefined) {
    return {
      ms: fallback,
      what: `${name} ${formatFlagDuration(fallback)}`,
      isDefault: true,
      knob,
      offsetMs: 0,
      format,
    };
  }
  let ms: number;
  try {
    ms = parseAnyDuration(value);
  } catch (error) {
    throw new RangeError(
      error instanceof DurationTooLongError
        ? `${name} "${value}" is longer than lastcall can time (${MAX_DURATION_TEXT})`
        : `${name} "${value}" is not a duration`,
    );
  }
  return {
    ms,
    what: `${name} ${formatFlagDuration(ms)}`,
    isDefault: false,
    knob,
    offsetMs: 0,
    format,
  };
}

/**
 * A duration as Go's `time.ParseDuration` reads it (`1m30s`, `0.5s`, `0`; a bare `5` is not
 * one), in milliseconds (negative ones as 0: a Go timer fires at once); undefined when it is
 * not Go's syntax. Istio's variables and Envoy Gateway's flags are read this way.
 *
 * @example
 * ```ts
 * goDurationMs("1m30s"); // 90000
 * goDurationMs("30"); // undefined
 * ```
 */
export function goDurationMs(text: string): number | undefined {
  let ms: number;
  try {
    ms = parseGoDuration(text);
  } catch {
    return undefined;
  }
  return ms <= 0 ? 0 : Math.round(ms);
}

/**
 * A setting written as a Go duration, or `fallback` when absent.
 *
 * @example
 * ```ts
 * goSetting("--min-drain-duration", "15s", 10_000).ms; // 15000
 * ```
 * @throws {RangeError} naming the setting when the value is not a Go duration
 */
export function goSetting(
  name: string,
  value: string | undefined,
  fallback: number,
  knob = name,
): Setting {
  if (value === undefined) return setting(name, undefined, fallback, knob);
  const ms = goDurationMs(value);
  if (ms === undefined) {
    throw new RangeError(
      `${name} "${value}" is not a Go duration (e.g. ${/^\d+$/.test(value) ? `${value}s` : "10s"})`,
    );
  }
  return {
    ms,
    what: `${name} ${formatFlagDuration(ms)}`,
    isDefault: false,
    knob,
    offsetMs: 0,
    format: formatFlagDuration,
  };
}

/** The earlier of two settings (the one that binds). */
export const earlier = (a: Setting, b: Setting) => (b.ms < a.ms ? b : a);
/** The later of two settings. */
export const later = (a: Setting, b: Setting) => (b.ms > a.ms ? b : a);

/** A native sidecar: an init container the kubelet restarts, and stops after the app. */
export const isNative = (c: ContainerSpec, init: boolean): boolean =>
  init && c.restartPolicy === "Always";
