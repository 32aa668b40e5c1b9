// What `lastcall inject` adds to a pod, as plain objects: the sidecar container in its two
// shapes, the Envoy config volume, and (classic mode) the copy of the binary that lets the app
// container run `lastcall exec`.
import { MAX_DURATION_MS } from "../lib/duration.ts";
import { drainHookCommand } from "../drain/hook.ts";
import { VERSION } from "../version.ts";

/** How the sidecar is attached to the pod. */
export type SidecarMode = "native" | "classic";

/** Options of {@linkcode sidecarContainer}. */
export interface SidecarOptions {
  /**
   * `native`: an init container with `restartPolicy: Always` (Kubernetes ≥ 1.29), started and
   * ready before the app, stopped after it. `classic`: the first regular container, with a
   * postStart hook that holds the app until the proxy is ready.
   * @default "native"
   */
  mode: SidecarMode;
  /** The lastcall image (its entrypoint is `lastcall`). @default `lastcall:<version>` */
  image: string;
  /**
   * The user's ConfigMap holding `envoy.yaml`, mounted at `/etc/envoy`. Unset: inject writes
   * `<workload>-lastcall-envoy`, one listener per declared app port.
   */
  configMap?: string;
  /** The status server's port, when {@linkcode STATUS_PORT} is taken in the pod. @default 15020 */
  statusPort?: number;
  /** Envoy's admin port, when {@linkcode ADMIN_PORT} is taken in the pod. @default 15000 */
  adminPort?: number;
  /** The container's `ports`: Envoy's listeners, named as the app ports they front. */
  ports?: Record<string, unknown>[];
  /**
   * Whether the app waits for Envoy to be ready before it starts (native: the sidecar's startup
   * probe; classic: its postStart `lastcall wait`). @default true
   */
  hold?: boolean;
  /**
   * Whether the sidecar has a readiness probe of its own. inject turns it off when an app
   * container's readiness probe goes through Envoy: that probe already says Envoy serves, and a
   * probe of the sidecar's costs a new pod a second on the kubelet (docs/kubernetes.md).
   * @default true
   */
  readiness?: boolean;
}

/** Defaults of {@linkcode SidecarOptions}. */
export const SIDECAR_DEFAULTS: SidecarOptions = { mode: "native", image: `lastcall:${VERSION}` };

/** Name of the injected container; a pod that has a container of this name is left alone. */
export const SIDECAR_NAME = "lastcall";
/** The status server's port: probes and `lastcall wait` / `exec` talk to it. */
export const STATUS_PORT = 15020;
/** Envoy's admin port in the pod (on 127.0.0.1): `lastcall run`'s default. */
export const ADMIN_PORT = 15000;
/** How long the sidecar's readiness probe lets a starting Envoy take (`/healthz/ready?wait_ms=`). */
export const READY_PROBE_WAIT_MS = 2900;
/** The readiness probe's `timeoutSeconds`: above its wait, so the kubelet hears the answer. */
export const READY_PROBE_TIMEOUT_SECONDS = 3;
/** Kubernetes' `terminationGracePeriodSeconds` when a pod does not set it. */
export const DEFAULT_GRACE_SECONDS = 30;
/** Where the Envoy config volume is mounted, and the config file inside it. */
export const CONFIG_DIR = "/etc/envoy";
const CONFIG_FILE = `${CONFIG_DIR}/envoy.yaml`;
/** Volume of the Envoy config. */
export const CONFIG_VOLUME = "lastcall-config";
/** What an app container's preStop asks lastcall's status server: its SIGTERM waits for the quiet. */
export const APP_STOP_PATH = "/v1/app-stop";

/**
 * The preStop inject gives an app container that has none: an `httpGet`, so the app image
 * needs nothing; the kubelet sends it to the pod's IP.
 *
 * @example
 * ```ts
 * appStopHook(15020); // { httpGet: { path: "/v1/app-stop", port: 15020 } }
 * ```
 */
export function appStopHook(statusPort = STATUS_PORT): Record<string, unknown> {
  return { httpGet: { path: APP_STOP_PATH, port: statusPort } };
}

/** Init container that copies the lastcall binary for `lastcall exec` (classic mode). */
export const INSTALL_NAME = "lastcall-install";
/** emptyDir volume that carries the binary from the lastcall image to the app container. */
export const BIN_VOLUME = "lastcall-bin";
const BIN_DIR = "/lastcall/bin";
/** The copied binary, as the app container sees it. */
export const BIN_PATH = `${BIN_DIR}/lastcall`;

/**
 * The shortest `terminationGracePeriodSeconds` lastcall's default timings fit in: the drain
 * must end `--stop-margin` (2 s) before `--grace`, and lasts at least `--min-drain` (5 s).
 */
export const MIN_GRACE_SECONDS = 8;
/** The longest `--grace` `lastcall run` takes, in whole seconds (a timer's most). */
export const MAX_GRACE_SECONDS = Math.floor(MAX_DURATION_MS / 1000);

/**
 * The pod's termination grace period in seconds: Kubernetes' default when absent, 1 when
 * negative (the API server makes a pod's so, with a warning).
 */
export function graceSeconds(spec: Record<string, unknown>): number {
  const value = spec.terminationGracePeriodSeconds;
  if (typeof value !== "number" || !Number.isInteger(value)) return DEFAULT_GRACE_SECONDS;
  return Math.max(value, 1);
}

/**
 * The `lastcall run` arguments for a pod whose grace period is `graceSeconds`: the status
 * server listens on all addresses because the kubelet probes the pod IP, and the config is
 * watched because Kubernetes updates ConfigMap volumes in place (a hot restart follows).
 */
export function runArgs(
  graceSeconds: number,
  statusPort = STATUS_PORT,
  adminPort = ADMIN_PORT,
): string[] {
  const port = statusPort === STATUS_PORT ? [] : ["--status-port", String(statusPort)];
  const admin = adminPort === ADMIN_PORT ? [] : ["--admin-port", String(adminPort)];
  return [
    "run",
    "--config",
    CONFIG_FILE,
    "--grace",
    `${Math.min(graceSeconds, MAX_GRACE_SECONDS)}s`,
    "--status-address",
    "0.0.0.0",
    ...port,
    ...admin,
    "--watch",
    CONFIG_FILE,
  ];
}

/** `--status-url` for the hooks and `lastcall exec` when the status port is not the default. */
function statusUrl(statusPort: number, path = ""): string[] {
  return statusPort === STATUS_PORT
    ? []
    : ["--status-url", `http://127.0.0.1:${statusPort}${path}`];
}

/**
 * The sidecar container for a pod with `graceSeconds` of termination grace.
 *
 * @example
 * ```ts
 * sidecarContainer(30, SIDECAR_DEFAULTS).restartPolicy; // "Always"
 * ```
 */
export function sidecarContainer(
  graceSeconds: number,
  options: SidecarOptions,
): Record<string, unknown> {
  const port = options.statusPort ?? STATUS_PORT;
  const probe = (path: string) => ({ httpGet: { path, port } });
  // lastcall's first start: the answer waits for Envoy (up to 2.9 s, in the probe's 3 s timeout),
  // so the pod is Ready as soon as Envoy is, not a probe period later.
  const ready = {
    ...probe(`/healthz/ready?wait_ms=${READY_PROBE_WAIT_MS}`),
    timeoutSeconds: READY_PROBE_TIMEOUT_SECONDS,
  };
  const common = {
    name: SIDECAR_NAME,
    image: options.image,
    args: runArgs(graceSeconds, port, options.adminPort),
    ...(options.ports?.length ? { ports: options.ports } : {}),
  };
  const mounts = { volumeMounts: [{ name: CONFIG_VOLUME, mountPath: CONFIG_DIR, readOnly: true }] };
  const hold = options.hold ?? true;
  // Every second, not Kubernetes' 10 s: the pod is Ready only once this probe passed, and a
  // rollout waits for each new pod (measured: 8.9 s against 3–4 s per step with 10 s).
  const readiness = (options.readiness ?? true)
    ? { readinessProbe: { ...ready, periodSeconds: 1 } }
    : {};
  if (options.mode === "native") {
    return {
      ...common,
      restartPolicy: "Always",
      // Holding: the kubelet starts the next container once the startup probe passes, so the
      // app starts with the proxy ready (60 × 1 s, `lastcall wait`'s default timeout). Without
      // it the app starts as soon as the sidecar has started.
      ...(hold ? { startupProbe: { ...ready, periodSeconds: 1, failureThreshold: 60 } } : {}),
      ...readiness,
      livenessProbe: probe("/healthz/live"),
      // A native sidecar's preStop runs when the pod starts terminating, its SIGTERM only after
      // the app has exited: draining at the start tells keep-alive clients to go elsewhere
      // while the app still answers, and Envoy keeps serving the app until it is gone.
      lifecycle: { preStop: { exec: { command: drainHookCommand(statusUrl(port)) } } },
      ...mounts,
    };
  }
  return {
    ...common,
    ...readiness,
    livenessProbe: probe("/healthz/live"),
    // Holding: the kubelet starts the next container only once this hook returns.
    ...(hold
      ? {
        lifecycle: {
          postStart: {
            exec: { command: ["lastcall", "wait", ...statusUrl(port, "/healthz/ready")] },
          },
        },
      }
      : {}),
    ...mounts,
  };
}

/** The volume holding the Envoy config. */
export function configVolume(configMap: string): Record<string, unknown> {
  return { name: CONFIG_VOLUME, configMap: { name: configMap } };
}

/**
 * The init container that copies lastcall into {@linkcode BIN_VOLUME}, for app images that do
 * not have it. The copy is the same single executable, so the app image needs glibc.
 */
export function installContainer(image: string): Record<string, unknown> {
  return {
    name: INSTALL_NAME,
    image,
    command: ["cp", "/usr/local/bin/lastcall", BIN_PATH],
    volumeMounts: [{ name: BIN_VOLUME, mountPath: BIN_DIR }],
  };
}

/** The emptyDir volume between {@linkcode installContainer} and the app. */
export function binVolume(): Record<string, unknown> {
  return { name: BIN_VOLUME, emptyDir: {} };
}

/** The app container's mount of {@linkcode BIN_VOLUME}. */
export function binMount(): Record<string, unknown> {
  return { name: BIN_VOLUME, mountPath: BIN_DIR, readOnly: true };
}

/**
 * An app command run under `lastcall exec`: it waits for the proxy and tells it when the app
 * runs and when it exited. `quit` (Jobs): the app's end also stops the proxy; otherwise the
 * kubelet restarts an app that ends, and the proxy stays.
 */
export function wrapCommand(
  command: readonly string[],
  quit: boolean,
  statusPort = STATUS_PORT,
): string[] {
  return [
    BIN_PATH,
    "exec",
    ...statusUrl(statusPort, "/healthz/ready"),
    ...(quit ? [] : ["--no-quit"]),
    "--",
    ...command,
  ];
}

/** Whether a command already runs under `lastcall exec`. */
export function isWrapped(command: readonly unknown[]): boolean {
  return typeof command[0] === "string" && /(^|\/)lastcall$/.test(command[0]) &&
    command[1] === "exec";
}
