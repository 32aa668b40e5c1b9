// What Contour's and Envoy Gateway's shutdown pairs share (contour.ts, gateway.ts): the HTTP
// server the Envoy container's preStop asks (it answers once a ready file exists), Envoy's admin
// as either names it, the count a drain waits on, and the drain of a `lastcall run` beside Envoy.
import { access, writeFile } from "node:fs/promises";
import type { ServerResponse } from "node:http";
import { Hono } from "hono";
import { delay, pollUntil } from "../lib/async.ts";
import { AdminClient } from "../envoy/admin.ts";
import { GAUGE_NAMES, isInflightGauge, parseStatsJson, type Stat } from "../envoy/stats.ts";
import type { EventLog } from "../lib/log.ts";
import { retry } from "../lib/retry.ts";
import { listen, type StatusServer } from "../status/listen.ts";

/** Options of {@linkcode serveReadyFile}. */
export interface ReadyFileServerOptions {
  /** Port on 0.0.0.0 (0: any free one, said in the `serving` event). */
  port: number;
  /** The liveness path: 200 with `healthBody`. */
  healthPath: string;
  /** Contour's `OK`, Envoy Gateway's empty body. */
  healthBody: string;
  /** The path the Envoy container's preStop asks: answered once `readyFile` exists. */
  readyPath: string;
  /** Its body when ready. */
  readyBody: string;
  /** The file the `shutdown` hook writes when the drain is finished. */
  readyFile: string;
  /** Answer 500 when the file has not come after this long (Envoy Gateway's `--ready-timeout`); none when absent. */
  readyTimeoutMs?: number;
}

/**
 * Serves a shutdown-manager until closed: `healthPath`, and `readyPath`, which holds the
 * request until `readyFile` exists (checked every 100 ms: Contour and Envoy Gateway check once
 * a second; sooner costs nothing and ends sooner).
 *
 * @example
 * ```ts
 * const server = await serveReadyFile({ port: 8090, healthPath: "/healthz", healthBody: "OK", readyPath: "/shutdown", readyBody: "OK", readyFile: "/admin/ok" }, log);
 * ```
 */
export async function serveReadyFile(
  options: ReadyFileServerOptions,
  log: EventLog,
): Promise<StatusServer> {
  const app = new Hono();
  // Stopping: a held request checks the file once more and is answered before the server closes.
  // The kubelet stops this container right after its own preStop (`shutdown`) wrote the file,
  // often before the next 100 ms check: closing at once would fail the Envoy container's preStop.
  const stopping = new AbortController();
  const answered = new Set<Promise<void>>();
  app.get(options.healthPath, (c) => c.body(options.healthBody, 200));
  app.get(options.readyPath, async function ready(c) {
    log("shutdown_requested", { ready_file: options.readyFile });
    const outgoing = (c.env as { outgoing?: ServerResponse } | undefined)?.outgoing;
    if (outgoing) {
      const sent = new Promise<void>((done) => outgoing.once("close", done));
      answered.add(sent);
      void sent.then(() => answered.delete(sent));
    }
    const exists = () => access(options.readyFile).then(() => true, () => undefined);
    const signals = [
      c.req.raw.signal,
      stopping.signal,
      ...(options.readyTimeoutMs === undefined
        ? []
        : [AbortSignal.timeout(options.readyTimeoutMs)]),
    ];
    try {
      await pollUntil(exists, 100, AbortSignal.any(signals));
    } catch (error) {
      if (stopping.signal.aborted) {
        if (await exists()) {
          log("shutdown_ready", { ready_file: options.readyFile, on: "stop" });
          return c.body(options.readyBody, 200);
        }
        // Stopped before the drain was done: said, and the hook fails as it would have.
        log("shutdown_stopped_not_ready", { ready_file: options.readyFile });
        return c.body("", 503);
      }
      if ((error as Error).name !== "TimeoutError") throw error;
      log("shutdown_ready_timeout", {
        ready_file: options.readyFile,
        timeout_ms: options.readyTimeoutMs,
      });
      return c.body("", 500);
    }
    log("shutdown_ready", { ready_file: options.readyFile });
    return c.body(options.readyBody, 200);
  });
  const server = await listen(app, "0.0.0.0", options.port);
  log("serving", { port: server.port });
  return {
    port: server.port,
    async close() {
      stopping.abort();
      // Held requests answer within one file check; never wait on them past a second.
      const limit = new AbortController();
      await Promise.race([
        Promise.allSettled([...answered]),
        delay(1000, limit.signal).catch(() => {}),
      ]);
      limit.abort();
      await server.close();
    },
  };
}

/**
 * Envoy's admin as a shutdown hook names it: a Unix socket path (Contour's `/admin/admin.sock`),
 * `host:port` (Envoy Gateway's `localhost:19000`), or a bare host with `port` (Contour's
 * deprecated `--admin-port`).
 *
 * @example
 * ```ts
 * adminFor("/admin/admin.sock").url; // "unix:/admin/admin.sock"
 * adminFor("localhost:19000").url; // "http://localhost:19000"
 * ```
 */
export function adminFor(address: string, port?: number): AdminClient {
  if (address.startsWith("/")) return new AdminClient(`unix:${address}`);
  const hasPort = /^(\[[^\]]+\]|[^:]+):\d+$/.test(address);
  return new AdminClient(
    `http://${hasPort || port === undefined ? address : `${address}:${port}`}`,
  );
}

/** Starts the drain of the `lastcall run` beside Envoy (`POST /drain`), if there is one; logs what happened. */
export async function startAgentDrain(statusUrl: string, log: EventLog): Promise<void> {
  const url = new URL("/drain", statusUrl);
  try {
    const response = await fetch(url, { method: "POST", signal: AbortSignal.timeout(2000) });
    log("agent_drain", { url: String(url), status: response.status });
  } catch (error) {
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    log("agent_drain_skipped", {
      url: String(url),
      reason: cause?.code ?? cause?.message ?? (error as Error).message,
    });
  }
}

/** Without the filter, what is counted: Contour's open HTTP connections, or Envoy Gateway's open listener connections. */
export type ConnectionCount = "contour" | "gateway";

/** The stats filter of {@linkcode readOpenCount}. */
const STATS_FILTER: Record<ConnectionCount, string> = {
  contour: `(downstream_cx_active|${GAUGE_NAMES})$`,
  gateway: `(^listener\\..*\\.downstream_cx_active|${GAUGE_NAMES})$`,
};

/** Envoy Gateway's `skipConnectionRE`: its admin, stats and readiness listeners, and per-worker stats. */
const GATEWAY_SKIPPED = /admin|19001|19003|worker/;

/**
 * What a shutdown hook counts: the filter's in-flight gauge when present (requests in flight,
 * idle keep-alive connections not counted), else open connections as the project it replaces
 * counts them: Contour, `http.*.downstream_cx_active` but the admin's; Envoy Gateway,
 * `listener.*.downstream_cx_active` but those matching `admin|19001|19003|worker`.
 *
 * @example
 * ```ts
 * openCount([{ name: "wasmcustom.lastcall_inflight", value: 2 }], "contour"); // { what: "inflight_requests", count: 2 }
 * ```
 */
export function openCount(
  stats: Stat[],
  without: ConnectionCount,
): { what: "inflight_requests" | "http_connections" | "listener_connections"; count: number } {
  const gauges = stats.filter((s) => isInflightGauge(s.name));
  if (gauges.length > 0) {
    return {
      what: "inflight_requests",
      count: gauges.reduce((sum, s) => sum + s.value, 0),
    };
  }
  let count = 0;
  if (without === "gateway") {
    for (const s of stats) {
      if (/^listener\..*\.downstream_cx_active$/.test(s.name) && !GATEWAY_SKIPPED.test(s.name)) {
        count += s.value;
      }
    }
    return { what: "listener_connections", count };
  }
  for (const s of stats) {
    if (/^http\.(.+)\.downstream_cx_active$/.test(s.name) && !s.name.startsWith("http.admin.")) {
      count += s.value;
    }
  }
  return { what: "http_connections", count };
}

/** Reads Envoy's stats once and counts as {@linkcode openCount}; throws when Envoy does not answer. */
export async function readOpenCount(
  admin: AdminClient,
  without: ConnectionCount,
): Promise<ReturnType<typeof openCount>> {
  return openCount(parseStatsJson(await admin.stats(STATS_FILTER[without])), without);
}

/**
 * `POST /healthcheck/fail`, retried as Contour does (4 attempts, 200 ms then × 5); logs
 * `healthcheck_failed` or each `healthcheck_fail_error`. Resolves whether it worked.
 */
export async function failHealthcheckRetrying(
  admin: AdminClient,
  log: EventLog,
  attempts = 4,
): Promise<boolean> {
  try {
    await retry(() => admin.failHealthcheck(), {
      maxAttempts: attempts,
      delayMs: (attempt) => 200 * 5 ** (attempt - 1),
      onError: (error, attempt) =>
        log("healthcheck_fail_error", { attempt: attempt - 1, error: String(error) }),
    });
  } catch {
    return false;
  }
  log("healthcheck_failed");
  return true;
}

/** Writes the ready file the shutdown-manager waits for; logs `drained`. */
export async function writeReadyFile(
  path: string,
  log: EventLog,
  fields: Record<string, unknown> = {},
): Promise<void> {
  await writeFile(path, "ok\n");
  log("drained", { ready_file: path, ...fields });
}
