// Contour's shutdown-manager pair, flag for flag (`shutdown-manager` and `shutdown`), so a Contour
// Envoy DaemonSet can swap in lastcall's image.
import { delay } from "../lib/async.ts";
import type { EventLog } from "../lib/log.ts";
import type { StatusServer } from "../status/listen.ts";
import {
  adminFor,
  failHealthcheckRetrying,
  readOpenCount,
  serveReadyFile,
  startAgentDrain,
  writeReadyFile,
} from "./drain-hooks.ts";

/** Options of {@linkcode shutdownManager}. */
export interface ShutdownManagerOptions {
  /** Port of `/healthz` and `/shutdown`. @default 8090 */
  servePort: number;
  /** The file `lastcall shutdown` writes when the drain is finished. @default "/admin/ok" */
  readyFile: string;
}

/**
 * Serves Contour's shutdown-manager endpoints until stopped: `GET /healthz` (`OK`) and
 * `GET /shutdown`, which answers `OK` once the ready file exists. Resolves with the server.
 *
 * @example
 * ```ts
 * const server = await shutdownManager({ servePort: 8090, readyFile: "/admin/ok" }, createEventLog("json"));
 * ```
 */
export function shutdownManager(
  options: ShutdownManagerOptions,
  log: EventLog,
): Promise<StatusServer> {
  return serveReadyFile({
    port: options.servePort,
    healthPath: "/healthz",
    healthBody: "OK",
    readyPath: "/shutdown",
    readyBody: "OK",
    readyFile: options.readyFile,
  }, log);
}

/** Options of {@linkcode shutdownEnvoy}, with Contour's names and defaults. */
export interface ShutdownOptions {
  /** Envoy's admin: a Unix socket path, or a host (then with `adminPort`). @default "/admin/admin.sock" */
  adminAddress: string;
  /** Only with a host `adminAddress` (Contour's deprecated form). @default 9001 */
  adminPort: number;
  /** Time between checks of the open count. @default 5000 */
  checkIntervalMs: number;
  /** Wait after failing the health check, before the first check. @default 0 */
  checkDelayMs: number;
  /** Wait first, before failing the health check: Envoy serves as before meanwhile. @default 0 */
  drainDelayMs: number;
  /** The drain is finished at or below this many. @default 0 */
  minOpenConnections: number;
  /** Written when the drain is finished. @default "/admin/ok" */
  readyFile: string;
  /**
   * Status server of a `lastcall run` beside Envoy (Contour's envoy container with lastcall's
   * image): its drain starts when Envoy's health check is failed, so its SIGTERM, which comes
   * after this hook, finds the drain done and stops Envoy at once instead of waiting
   * `--min-drain` again. Absent or not answering: nothing is lost, Contour's own sequence goes
   * on. @default "http://127.0.0.1:15020"
   */
  statusUrl?: string;
}

/**
 * `lastcall shutdown`, in Contour's order: `--drain-delay` (`drain_delay`), fail Envoy's health
 * check (`healthcheck_failed`, retried as Contour does) and start the drain of a `lastcall run`
 * beside Envoy (`agent_drain`), `--check-delay` (`check_delay`), then the open count every
 * `--check-interval` (`open_count`) until it is at most `--min-open-connections`; then the ready
 * file (`drained`). Unlike Contour, which polls a vanished Envoy until the kubelet's deadline, an
 * Envoy whose admin does not answer ends the wait (`open_count_failed`): nothing more can drain
 * through it.
 *
 * @example
 * ```ts
 * process.exitCode = await shutdownEnvoy({ adminAddress: "/admin/admin.sock", adminPort: 9001, checkIntervalMs: 5000, checkDelayMs: 0, drainDelayMs: 0, minOpenConnections: 0, readyFile: "/admin/ok" }, log);
 * ```
 */
export async function shutdownEnvoy(options: ShutdownOptions, log: EventLog): Promise<number> {
  // Contour ≥ 1.2x talks to Envoy's admin on a Unix socket only (`--admin-address
  // /admin/admin.sock`, `--admin-port` deprecated and ignored); a host address is the older form.
  const admin = adminFor(options.adminAddress, options.adminPort);
  log("drain_delay", { ms: options.drainDelayMs });
  await delay(options.drainDelayMs);
  await failHealthcheckRetrying(admin, log);
  if (options.statusUrl) await startAgentDrain(options.statusUrl, log);
  log("check_delay", { ms: options.checkDelayMs });
  await delay(options.checkDelayMs);
  for (;;) {
    try {
      const { what, count } = await readOpenCount(admin, "contour");
      log("open_count", { what, count, min: options.minOpenConnections });
      if (count <= options.minOpenConnections) break;
    } catch (error) {
      // Envoy gone or not answering: nothing more can drain through it.
      log("open_count_failed", { error: String(error) });
      break;
    }
    await delay(options.checkIntervalMs);
  }
  await writeReadyFile(options.readyFile, log);
  return 0;
}
