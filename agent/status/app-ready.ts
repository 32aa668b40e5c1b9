// `GET /v1/app-ready`: an app container's readiness probe in a classic pod, answered through
// Envoy. The sidecar starts beside the app there, so the kubelet's first probe may come before
// Envoy serves: it waits for Envoy, then asks the app's own path through the listener in front of it.
import { type IncomingHttpHeaders, request as httpRequest } from "node:http";
import type { ReadinessAnswer } from "./routes.ts";

/** What `/v1/app-ready` asks: the app's probe, and the kubelet's timeout for it. */
export interface AppReadyQuery {
  /** Envoy's inbound listener in front of the app's port. */
  port: number;
  /** The app probe's path (and query). */
  path: string;
  /** The probe's `timeoutSeconds` in ms: the answer comes before it. */
  timeoutMs: number;
  /** When the probe reached lastcall (ms since the epoch): its timeout runs from then. */
  askedAt: number;
}

/** What the route needs from the agent. */
export interface AppReadyControls {
  /** Readiness, waiting up to `waitMs` for a starting Envoy (`/healthz/ready?wait_ms=`). */
  ready(waitMs: number): Promise<ReadinessAnswer>;
  /** The ports of the serving Envoy's inbound listeners (none while no Envoy serves). */
  inboundPorts(): Promise<number[]>;
}

/** The longest probe timeout the route takes, in ms (the kubelet's own has no bound). */
export const APP_READY_MAX_TIMEOUT_MS = 600_000;

/** The answer leaves this long before the kubelet's timeout, so a late "not ready" is still read. */
const ANSWER_MARGIN_MS = 50;

/** Headers that belong to the kubelet's connection, not to the probe (RFC 9110, 7.6.1). */
const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  "content-length",
]);

/**
 * Reads `/v1/app-ready`'s query: `port` (1–65535), `path` (starting with `/`) and `timeout_ms`
 * (default 1000, the kubelet's default timeout); a string says why it is refused.
 *
 * @example
 * ```ts
 * appReadyQuery((name) => new URLSearchParams("port=18080&path=/ready").get(name) ?? undefined);
 * // { port: 18080, path: "/ready", timeoutMs: 1000, askedAt: Date.now() }
 * ```
 */
export function appReadyQuery(
  param: (name: string) => string | undefined,
  askedAt = Date.now(),
): AppReadyQuery | string {
  const portText = param("port");
  const port = /^\d{1,5}$/.test(portText ?? "") ? Number(portText) : 0;
  if (port < 1 || port > 65535) {
    return `port ${JSON.stringify(portText ?? null)} is not a TCP port from 1 to 65535`;
  }
  const path = param("path") ?? "/";
  if (!path.startsWith("/") || path.length > 2048) {
    return `path ${
      JSON.stringify(path.slice(0, 60))
    } does not start with / (or is over 2048 bytes)`;
  }
  const timeoutText = param("timeout_ms");
  const timeoutMs = timeoutText === undefined
    ? 1000
    : /^\d{1,6}$/.test(timeoutText)
    ? Number(timeoutText)
    : Number.NaN;
  if (!(timeoutMs >= 100 && timeoutMs <= APP_READY_MAX_TIMEOUT_MS)) {
    return `timeout_ms "${timeoutText}" is not a whole number of milliseconds from 100 to ${APP_READY_MAX_TIMEOUT_MS}`;
  }
  return { port, path, timeoutMs, askedAt };
}

/**
 * The app's readiness through Envoy: waits for a starting Envoy, then sends the probe's path and
 * headers to the inbound listener `query.port` on 127.0.0.1. Ready when the app answers 200–399
 * (the kubelet's rule); once lastcall stops taking inbound requests, the probe fails as the
 * listener does.
 *
 * @param controls The agent's readiness and Envoy's inbound ports
 * @param query The route's query, as {@linkcode appReadyQuery} read it
 * @param headers The kubelet's request headers (the probe's `httpHeaders` among them)
 * @example
 * ```ts
 * const query = { port: 18080, path: "/ready", timeoutMs: 1000, askedAt: Date.now() };
 * const answer = await appReady(controls, query, {});
 * // { ready: true, reason: "the app answered 200 through Envoy's listener 18080", status: 200 }
 * ```
 */
export async function appReady(
  controls: AppReadyControls,
  query: AppReadyQuery,
  headers: IncomingHttpHeaders,
): Promise<ReadinessAnswer & { status?: number }> {
  const deadline = query.askedAt + query.timeoutMs - ANSWER_MARGIN_MS;
  const envoy = await controls.ready(Math.max(0, deadline - Date.now()));
  // A drain keeps inbound served until lastcall stops it: the listener then answers for itself.
  if (!envoy.ready && envoy.reason !== "draining") return envoy;
  const ports = await controls.inboundPorts();
  if (!ports.includes(query.port)) {
    return {
      ready: false,
      reason: `port ${query.port} is not an inbound listener of Envoy (${
        ports.length > 0 ? `those are ${ports.join(", ")}` : "it has none now"
      })`,
    };
  }
  const through = `through Envoy's listener ${query.port}`;
  try {
    const status = await get(query, forwarded(headers), Math.max(1, deadline - Date.now()));
    const ready = status >= 200 && status < 400;
    return { ready, reason: `the app answered ${status} ${through}`, status };
  } catch (error) {
    return { ready: false, reason: `${through}: ${(error as Error).message}` };
  }
}

/** The kubelet's headers, without those of its own connection. */
function forwarded(headers: IncomingHttpHeaders): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined && !HOP_BY_HOP.has(name)) out[name] = value;
  }
  return out;
}

/** One GET on a new connection, as the kubelet's probes are; resolves with the status. */
function get(
  query: AppReadyQuery,
  headers: Record<string, string | string[]>,
  timeoutMs: number,
): Promise<number> {
  return new Promise((resolve, reject) => {
    const signal = AbortSignal.timeout(timeoutMs);
    const req = httpRequest(
      {
        host: "127.0.0.1",
        port: query.port,
        path: query.path,
        headers: { ...headers, connection: "close" },
        agent: false,
        signal,
      },
      (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      },
    );
    req.on(
      "error",
      (error) => reject(signal.aborted ? new Error(`no answer within ${timeoutMs} ms`) : error),
    );
    req.end();
  });
}
