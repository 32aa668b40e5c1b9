// The vocabulary of the timing checks: a proxy's termination timeline as settings that each
// know where they were read from and which knob changes them.
import { formatDuration } from "../lib/duration.ts";
import { type ContainerSpec, parseAnyDuration } from "./containers.ts";

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
  tool: "lastcall" | "istio" | "contour";
  /** A native sidecar: SIGTERM comes only after every app container has exited. */
  native: boolean;
  /** It is stopped no sooner than this; undefined when not known (a native sidecar waits for the app). */
  earliestStop?: Setting;
  /** Its listeners stop taking connections then, even if it runs on (Envoy's drain time). */
  listen?: Setting;
  /** It is stopped by then whatever the app still does; undefined when it waits for the app. */
  stop?: Setting;
  /** Its own deadline, which must fit in the pod's grace period. */
  deadline?: Setting;
  /** Native sidecars: how long it still runs after its SIGTERM (after the app's exit). */
  afterApp?: Setting;
  /** Whole findings about its set-up (a missing hook, an unreadable value). */
  problems: string[];
}

/** Whole seconds, for knobs such as `TERMINATION_DRAIN_DURATION_SECONDS`. */
export const secondsText = (ms: number) => `${Math.ceil(ms / 1000)}`;
/** `1.5s`, `2m`; zero as `0s`, the way people write it in flags. */
export const formatFlagDuration = (ms: number) => (ms === 0 ? "0s" : formatDuration(ms));

/** A setting read from `value`, or `fallback` (a default, in ms) when absent. */
export function setting(name: string, value: string | undefined, fallback: number, knob = name, format = formatFlagDuration): Setting {
  if (value === undefined) return { ms: fallback, what: `${name} ${formatFlagDuration(fallback)}`, isDefault: true, knob, offsetMs: 0, format };
  let ms: number;
  try {
    ms = parseAnyDuration(value);
  } catch {
    throw new RangeError(`${name} "${value}" is not a duration`);
  }
  return { ms, what: `${name} ${formatFlagDuration(ms)}`, isDefault: false, knob, offsetMs: 0, format };
}

/** The earlier of two settings (the one that binds). */
export const earlier = (a: Setting, b: Setting) => (b.ms < a.ms ? b : a);
/** The later of two settings. */
export const later = (a: Setting, b: Setting) => (b.ms > a.ms ? b : a);

/** A native sidecar: an init container the kubelet restarts, and stops after the app. */
export const isNative = (c: ContainerSpec, init: boolean): boolean => init && c.restartPolicy === "Always";
