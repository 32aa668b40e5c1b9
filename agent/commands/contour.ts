// Contour's shutdown-manager pair, flag for flag, so a Contour Envoy DaemonSet can swap the
// image: `shutdown-manager` serves the Envoy container's preStop (`GET /shutdown` blocks until
// the drain is finished); `shutdown` is the shutdown-manager container's own preStop, which
// fails Envoy's health check, waits until the open count is low enough, then writes the ready
// file. With the lastcall filter in Envoy it counts requests in flight, not open connections.
import { access, writeFile } from "node:fs/promises";
import { delay, pollUntil } from "../lib/async.ts";
import { AdminClient } from "../envoy/admin.ts";
import { GAUGE_NAMES, isInflightGauge, parseStatsJson, type Stat } from "../envoy/stats.ts";
import type { EventLog } from "../lib/log.ts";
import { listen, type StatusServer } from "../status/listen.ts";
import { Hono } from "hono";

/** Options of {@linkcode shutdownManager}. */
export interface ShutdownManagerOptions {
  /** Port of `/healthz` and `/shutdown`. @default 8090 */
  servePort: number;
  /** The file `lastcall shutdown` writes when the drain is finished. @default "/admin/ok" */
  readyFile: string;
}

/** Serves Contour's shutdown-manager endpoints until stopped; resolves with the server. */
export async function shutdownManager(options: ShutdownManagerOptions, log: EventLog): Promise<StatusServer> {
  const app = new Hono();
  app.get("/healthz", (c) => c.text("OK"));
  app.get("/shutdown", async function shutdown(c) {
    log("shutdown_requested", { ready_file: options.readyFile });
    // Contour checks the file once a second; a shorter period costs nothing and ends sooner.
    const signal = c.req.raw.signal;
    await pollUntil(() => access(options.readyFile).then(() => true, () => undefined), 100, signal);
    log("shutdown_ready", { ready_file: options.readyFile });
    return c.text("OK");
  });
  const server = await listen(app, "0.0.0.0", options.servePort);
  log("serving", { port: server.port });
  return server;
}

/** Options of {@linkcode shutdownEnvoy}, with Contour's names and defaults. */
export interface ShutdownOptions {
  /** Envoy's admin: a Unix socket path, or a host (then with `adminPort`). @default "/admin/admin.sock" */
  adminAddress: string;
  /** Only with a host `adminAddress` (Contour's deprecated form). @default 9001 */
  adminPort: number;
  /** Time between checks of the open count. @default 5000 */
  checkIntervalMs: number;
  /** Wait before the first check. @default 0 */
  checkDelayMs: number;
  /** Wait after failing the health check, before checking. @default 0 */
  drainDelayMs: number;
  /** The drain is finished at or below this many. @default 0 */
  minOpenConnections: number;
  /** Written when the drain is finished. @default "/admin/ok" */
  readyFile: string;
  /**
   * Status server of a `lastcall run` beside Envoy (Contour's envoy container with lastcall's
   * image): its drain starts with this one, so its SIGTERM, which comes after this hook, finds
   * the drain done and stops Envoy at once instead of waiting `--min-drain` again. Absent or not
   * answering: nothing is lost, Contour's own sequence goes on. @default "http://127.0.0.1:15020"
   */
  statusUrl?: string;
}

/** Starts the drain of the `lastcall run` beside Envoy, if there is one; logs what happened. */
async function startAgentDrain(statusUrl: string, log: EventLog): Promise<void> {
  const url = new URL("/drain", statusUrl);
  try {
    const response = await fetch(url, { method: "POST", signal: AbortSignal.timeout(2000) });
    log("agent_drain", { url: String(url), status: response.status });
  } catch (error) {
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    log("agent_drain_skipped", { url: String(url), reason: cause?.code ?? cause?.message ?? (error as Error).message });
  }
}

/** What `shutdown` counts: the filter's in-flight gauge when present, else open HTTP connections. */
export function openCount(stats: Stat[]): { what: "inflight_requests" | "http_connections"; count: number } {
  const gauges = stats.filter((s) => isInflightGauge(s.name));
  if (gauges.length > 0) return { what: "inflight_requests", count: gauges.reduce((sum, s) => sum + s.value, 0) };
  let count = 0;
  for (const s of stats) if (/^http\.(.+)\.downstream_cx_active$/.test(s.name) && !s.name.startsWith("http.admin.")) count += s.value;
  return { what: "http_connections", count };
}

/** `lastcall shutdown`: fail health, wait for the open count to fall, write the ready file. */
export async function shutdownEnvoy(options: ShutdownOptions, log: EventLog): Promise<number> {
  // Contour ≥ 1.2x talks to Envoy's admin on a Unix socket only (`--admin-address
  // /admin/admin.sock`, `--admin-port` deprecated and ignored); a host address is the older form.
  const admin = new AdminClient(options.adminAddress.startsWith("/") ? `unix:${options.adminAddress}` : `http://${options.adminAddress}:${options.adminPort}`);
  // Contour retries the health-check failure a few times with a growing backoff.
  let failed = false;
  for (let attempt = 0, wait = 200; attempt < 4 && !failed; attempt++, wait *= 5) {
    try {
      await admin.failHealthcheck();
      failed = true;
    } catch (error) {
      log("healthcheck_fail_error", { attempt, error: String(error) });
      await delay(wait);
    }
  }
  if (failed) log("healthcheck_failed");
  if (options.statusUrl) await startAgentDrain(options.statusUrl, log);
  await delay(options.drainDelayMs + options.checkDelayMs);
  for (;;) {
    try {
      const { what, count } = openCount(parseStatsJson(await admin.stats(`(downstream_cx_active|${GAUGE_NAMES})$`)));
      log("open_count", { what, count, min: options.minOpenConnections });
      if (count <= options.minOpenConnections) break;
    } catch (error) {
      // Envoy gone or not answering: nothing more can drain through it.
      log("open_count_failed", { error: String(error) });
      break;
    }
    await delay(options.checkIntervalMs);
  }
  await writeFile(options.readyFile, "ok\n");
  log("drained", { ready_file: options.readyFile });
  return 0;
}
