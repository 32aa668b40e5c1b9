// Envoy's admin API: thin fetches here, pure parsing in stats.ts.
import { readFile } from "node:fs/promises";

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

/** Calls one Envoy's admin API on 127.0.0.1. Mutating endpoints use POST, as Envoy requires. */
export class AdminClient {
  readonly #timeoutMs: number;
  /** Base URL, e.g. `http://127.0.0.1:15000`. */
  readonly url: string;

  /** @param url base URL of the admin listener */
  constructor(url: string, options: AdminClientOptions = {}) {
    this.url = url.replace(/\/$/, "");
    this.#timeoutMs = options.timeoutMs ?? 2000;
  }

  /** Sends one admin request; throws with the path and status when it fails. */
  async request(method: "GET" | "POST", path: string, signal?: AbortSignal): Promise<string> {
    const timeout = AbortSignal.timeout(this.#timeoutMs);
    const response = await fetch(`${this.url}${path}`, {
      method,
      signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
    });
    const body = await response.text();
    if (!response.ok) throw new Error(`Envoy admin ${method} ${path} answered ${response.status}: ${body.trim()}`);
    return body;
  }

  /** Asks `/ready`; never throws. */
  async readiness(timeoutMs = this.#timeoutMs): Promise<Readiness> {
    try {
      const response = await fetch(`${this.url}/ready`, { signal: AbortSignal.timeout(timeoutMs) });
      const state = (await response.text()).trim();
      return response.status === 200
        ? { live: true, state }
        : { live: false, state, reason: `Envoy is ${state}` };
    } catch (error) {
      return { live: false, state: "unreachable", reason: `Envoy admin unreachable at ${this.url}: ${(error as Error).message}` };
    }
  }

  /** `GET /stats?format=json&usedonly&filter=RE`: the raw JSON text, parsed by stats.ts. */
  stats(filter: string, signal?: AbortSignal): Promise<string> {
    return this.request("GET", `/stats?format=json&usedonly&filter=${encodeURIComponent(filter)}`, signal);
  }

  /** `POST /drain_listeners`, inbound listeners only unless `all`, with Envoy's graceful drain. */
  drainListeners(scope: "inbound" | "all", signal?: AbortSignal): Promise<string> {
    return this.request("POST", scope === "inbound" ? "/drain_listeners?inboundonly&graceful" : "/drain_listeners?graceful", signal);
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
 * Reads the admin address Envoy wrote with `--admin-address-path`, e.g. `127.0.0.1:15000`.
 * Returns undefined while the file does not exist yet.
 */
export async function readAdminAddress(path: string): Promise<string | undefined> {
  try {
    const text = (await readFile(path, "utf8")).trim();
    return text ? `http://${text}` : undefined;
  } catch {
    return undefined;
  }
}
