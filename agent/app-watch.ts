// The app beside the proxy. In a classic sidecar pod both containers get SIGTERM at once, and
// many apps then take seconds to finish, calling other services through Envoy while they do:
// the drain must not end while the app still runs. Two ways to know: `lastcall exec` wrapping
// the app says when it runs and when it exited (`POST /v1/app`), or `--app-port`: the app runs
// while its port on 127.0.0.1 accepts connections.
import { connect } from "node:net";
import { delay } from "./async.ts";
import type { EventLog } from "./log.ts";
import type { AppReport } from "./server/app.ts";

/** How often a waiting drain looks at the app again. */
const APP_POLL_MS = 100;

/** Whether something accepts connections on 127.0.0.1:`port`. */
export function accepts(port: number, timeoutMs = 250): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: "127.0.0.1", port });
    const done = (open: boolean) => {
      socket.destroy();
      resolve(open);
    };
    socket.setTimeout(timeoutMs, () => done(true)); // accepted into the backlog but slow: it runs
    socket.once("connect", () => done(true));
    socket.once("error", () => done(false));
  });
}

/** The most apps `lastcall exec` may report at once; more are refused (a pod has a few). */
export const MAX_APPS = 64;

/**
 * What lastcall knows of the apps beside it: each `lastcall exec` reports its app under its
 * own id, so a pod with two wrapped containers is done when both have exited.
 *
 * @example
 * ```ts
 * const app = new AppWatch({ port: 8080 }, log);
 * await app.waitGone(signal); // true if it had to wait
 * ```
 */
export class AppWatch {
  readonly #port?: number;
  readonly #log: EventLog;
  /** Apps `lastcall exec` said run, by report id. */
  readonly #running = new Map<string, number | undefined>();
  /** Whether any `lastcall exec` reported: then its word, not the port, says what runs. */
  #heard = false;

  constructor(options: { port?: number }, log: EventLog) {
    this.#port = options.port;
    this.#log = log;
  }

  /**
   * `lastcall exec` says an app runs, or has exited.
   *
   * @returns false when the report was refused: a new app beyond {@linkcode MAX_APPS}
   */
  report(report: AppReport): boolean {
    const id = report.id ?? "app";
    if (report.state === "running") {
      if (this.#running.has(id)) return true;
      if (this.#running.size >= MAX_APPS) return false;
      this.#running.set(id, report.pid);
    } else if (!this.#running.delete(id) && this.#heard) {
      return true;
    }
    this.#heard = true;
    this.#log(report.state === "running" ? "app_running" : "app_exited", { pid: report.pid, status: report.status, via: "lastcall exec", running: this.#running.size });
    return true;
  }

  /** Whether an app is known to run now. */
  async running(): Promise<boolean> {
    if (this.#running.size > 0) return true;
    if (this.#heard || this.#port === undefined) return false;
    return await accepts(this.#port);
  }

  /** Waits until no app runs; resolves false at once if none was running. */
  async waitGone(signal: AbortSignal): Promise<boolean> {
    if (!await this.running()) return false;
    const viaExec = this.#running.size > 0;
    this.#log("app_wait", { via: viaExec ? "lastcall exec" : `port ${this.#port}`, ...(viaExec ? { running: this.#running.size } : {}) });
    while (await this.running()) await delay(APP_POLL_MS, signal);
    if (!viaExec) this.#log("app_exited", { via: `port ${this.#port}` });
    return true;
  }
}
