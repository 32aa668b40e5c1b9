// Envoy's admin API: thin requests here, pure parsing in stats.ts.
import { readFile } from "node:fs/promises";
import { request as httpRequest } from "node:http";

/** Envoy's server state as `/ready` and `/server_info` name it. */
export type ServerState = "PRE_INITIALIZING" | "INITIALIZING" | "LIVE" | "DRAINING" | string;

/** What `/ready` said, or why it could not be asked. */
export interface Readiness {
  /** True only when Envoy answered 200 LIVE. */
  live: boolean;
  /** Envoy's state, or `unreachable`. */
  state: ServerState;
  /** Why it is not live, for operators. */
  reason?: string;
}

/** Options of {@linkcode AdminClient}. */
export interface AdminClientOptions {
  /** Timeout of one admin call. @default 2000 */
  timeoutMs?: number;
}

/** Where an admin listens: `http://127.0.0.1:15000`, or `unix:/admin/admin.sock` (a pipe). */
export type AdminAddress = string;

/** Turns an admin address into node:http request options (host and port, or a socket path). */
function target(url: string): { socketPath: string } | { host: string; port: number } {
  if (url.startsWith("unix:")) return { socketPath: url.slice("unix:".length) };
  const parsed = new URL(url);
  return { host: parsed.hostname, port: Number(parsed.port || 80) };
}

/**
 * Calls one Envoy's admin API on 127.0.0.1 or a Unix socket (Contour's bootstraps put it on
 * `/admin/admin.sock`). Mutating endpoints use POST, as Envoy requires.
 */
export class AdminClient {
  readonly #timeoutMs: number;
  /** Base address, e.g. `http://127.0.0.1:15000` or `unix:/admin/admin.sock`. */
  readonly url: AdminAddress;

  /** @param url base URL of the admin listener, or `unix:<path>` */
  constructor(url: AdminAddress, options: AdminClientOptions = {}) {
    this.url = url.replace(/\/$/, "");
    this.#timeoutMs = options.timeoutMs ?? 2000;
  }

  /** Sends one request and reads the whole answer; rejects on a network error, a timeout or `signal`. */
  #send(
    method: "GET" | "POST",
    path: string,
    signal: AbortSignal,
  ): Promise<{ status: number; body: string }> {
    return new Promise((resolve, reject) => {
      if (signal.aborted) return reject(signal.reason);
      const req = httpRequest(
        { ...target(this.url), method, path, signal, agent: false },
        (res) => {
          let body = "";
          res.setEncoding("utf8");
          res.on("data", (chunk: string) => (body += chunk));
          res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
          res.on("error", reject);
        },
      );
      req.on("error", (error) => reject(signal.aborted ? signal.reason : error));
      req.end();
    });
  }

  /** Sends one admin request; throws with the path and status when it fails. */
  async request(method: "GET" | "POST", path: string, signal?: AbortSignal): Promise<string> {
    const timeout = AbortSignal.timeout(this.#timeoutMs);
    const { status, body } = await this.#send(
      method,
      path,
      signal ? AbortSignal.any([signal, timeout]) : timeout,
    );
    if (status < 200 || status >= 300) {
      throw new Error(`Envoy admin ${method} ${path} answered ${status}: ${body.trim()}`);
    }
    return body;
  }

  /** Asks `/ready`; never throws. */
  async readiness(timeoutMs = this.#timeoutMs): Promise<Readiness> {
    try {
      const { status, body } = await this.#send("GET", "/ready", AbortSignal.timeout(timeoutMs));
      const state = body.trim();
      return status === 200
        ? { live: true, state }
        : { live: false, state, reason: `Envoy is ${state}` };
    } catch (error) {
      return {
        live: false,
        state: "unreachable",
        reason: `Envoy admin unreachable at ${this.url}: ${(error as Error).message}`,
      };
    }
  }

  /** `GET /stats?format=json&usedonly&filter=RE`: the raw JSON text, parsed by stats.ts. */
  stats(filter: string, signal?: AbortSignal): Promise<string> {
    return this.request(
      "GET",
      `/stats?format=json&usedonly&filter=${encodeURIComponent(filter)}`,
      signal,
    );
  }

  /** `POST /drain_listeners`, inbound listeners only unless `all`, with Envoy's graceful drain. */
  drainListeners(scope: "inbound" | "all", signal?: AbortSignal): Promise<string> {
    return this.request(
      "POST",
      scope === "inbound" ? "/drain_listeners?inboundonly&graceful" : "/drain_listeners?graceful",
      signal,
    );
  }

  /** `POST /healthcheck/fail`: the health-check filter starts failing. */
  failHealthcheck(signal?: AbortSignal): Promise<string> {
    return this.request("POST", "/healthcheck/fail", signal);
  }

  /** `POST /quitquitquit`: Envoy exits cleanly, without draining. */
  quit(signal?: AbortSignal): Promise<string> {
    return this.request("POST", "/quitquitquit", signal);
  }
}

/**
 * Reads the admin address Envoy wrote with `--admin-address-path`: `127.0.0.1:15000`, or the
 * socket's path for a pipe. Returns undefined while the file does not exist yet.
 */
export async function readAdminAddress(path: string): Promise<AdminAddress | undefined> {
  try {
    const text = (await readFile(path, "utf8")).trim();
    if (!text) return undefined;
    return text.startsWith("/") ? `unix:${text}` : `http://${text}`;
  } catch {
    return undefined;
  }
}
