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

/**
 * What lastcall knows of the app.
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
  #state: "unknown" | AppReport["state"] = "unknown";

  constructor(options: { port?: number }, log: EventLog) {
    this.#port = options.port;
    this.#log = log;
  }

  /** `lastcall exec` says the app runs, or has exited. */
  report(report: AppReport): void {
    if (report.state === this.#state) return;
    this.#state = report.state;
    this.#log(report.state === "running" ? "app_running" : "app_exited", { pid: report.pid, status: report.status, via: "lastcall exec" });
  }

  /** Whether the app is known to run now. */
  async running(): Promise<boolean> {
    if (this.#state === "running") return true;
    if (this.#state === "exited" || this.#port === undefined) return false;
    return await accepts(this.#port);
  }

  /** Waits until the app no longer runs; resolves false at once if it was not running. */
  async waitGone(signal: AbortSignal): Promise<boolean> {
    if (!await this.running()) return false;
    this.#log("app_wait", { via: this.#state === "running" ? "lastcall exec" : `port ${this.#port}` });
    while (await this.running()) await delay(APP_POLL_MS, signal);
    if (this.#state !== "exited") this.#log("app_exited", { via: `port ${this.#port}` });
    return true;
  }
}
