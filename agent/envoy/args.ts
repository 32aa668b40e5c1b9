/** What one Envoy process is started with. */
export interface EnvoyLaunch {
  /** Effective bootstrap written by lastcall. */
  configPath: string;
  /** Worker threads. */
  concurrency: number;
  /** Hot-restart epoch: 0 for a fresh start, N+1 to replace epoch N. */
  epoch: number;
  /** Where epoch 0 records its dynamic base id, and where later epochs read it. */
  baseIdPath: string;
  /** Base id read from `baseIdPath`; required for epochs above 0. */
  baseId?: number;
  /** False runs Envoy with `--disable-hot-restart`. */
  hotRestart: boolean;
  /** Envoy writes its admin address here, so port 0 works. */
  adminAddressPath: string;
  /** `--drain-time-s`. */
  drainTimeMs: number;
  /** lastcall's limit for an old epoch (`--parent-shutdown`); Envoy's timer is set a second past it. */
  parentShutdownMs: number;
  /** Passed through after lastcall's own arguments. */
  extraArgs: string[];
}

const seconds = (ms: number) => String(Math.max(1, Math.ceil(ms / 1000)));

/**
 * Builds Envoy's command line. Every unusual flag says why it is there.
 *
 * @example
 * ```ts
 * envoyArgs({ configPath: "/run/envoy.yaml", epoch: 0, hotRestart: true, ... });
 * ```
 */
export function envoyArgs(launch: EnvoyLaunch): string[] {
  const args = ["-c", launch.configPath, "--concurrency", String(launch.concurrency)];
  // lastcall learns the admin port from this file, so `--admin-port 0` works and the
  // child of a hot restart can be found even before it answers.
  args.push("--admin-address-path", launch.adminAddressPath);
  // `immediate`: once draining, every response carries Connection: close (HTTP/2: GOAWAY) at
  // once, so clients move away at their next request instead of over the whole drain time.
  args.push("--drain-strategy", "immediate");
  args.push("--drain-time-s", seconds(launch.drainTimeMs));
  // The old epoch of a hot restart may finish its requests for as long as lastcall's limit
  // (`--parent-shutdown`, 10 minutes by default), and a second more: lastcall says what is still
  // in flight at the limit before Envoy's timer ends it. Only the child may end its parent (it
  // sends the parent a terminate message at shutdown, and Envoy aborts when that send fails, so a
  // parent stopped behind the child's back breaks the child's own shutdown).
  args.push("--parent-shutdown-time-s", String(Math.ceil(launch.parentShutdownMs / 1000) + 1));
  if (!launch.hotRestart) {
    args.push("--disable-hot-restart");
  } else if (launch.epoch === 0) {
    // A dynamic base id lets several lastcalls (and tests) share one host's /dev/shm.
    args.push("--use-dynamic-base-id", "--base-id-path", launch.baseIdPath);
  } else {
    if (launch.baseId === undefined) {
      throw new RangeError(`Cannot start epoch ${launch.epoch}: no base id recorded`);
    }
    args.push("--base-id", String(launch.baseId), "--restart-epoch", String(launch.epoch));
  }
  return [...args, ...launch.extraArgs];
}
