// The app beside the proxy: whether it still runs, from `lastcall exec` (`POST /v1/app`) or its
// port (`--app-port`), so a drain does not end under it (docs/architecture.md).
import { connect } from "node:net";
import { clearInterval, setInterval } from "node:timers";
import { delay } from "../lib/async.ts";
import type { EventLog } from "../lib/log.ts";

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

/** What `lastcall exec` says of the app it runs. */
export interface AppReport {
  state: "running" | "exited";
  /** Which `lastcall exec` reports (one per wrapped container); absent: a single app. */
  id?: string;
  pid?: number;
  /** Exit status, once exited. */
  status?: number;
}

/** The most apps `lastcall exec` may report at once; more are refused (a pod has a few). */
export const MAX_APPS = 64;

/** How often `lastcall exec` says again that its app runs (its lease). */
export const APP_RENEW_MS = 2000;

/**
 * An app not heard of for this long is taken as gone (`app_expired`): its `lastcall exec` was
 * killed (SIGKILL, OOM) before it could say the app exited. Three renewals missed.
 */
export const APP_LEASE_MS = 3 * APP_RENEW_MS;

/** One app `lastcall exec` said runs. */
interface Lease {
  pid?: number;
  /** When it was last heard of (the clock of {@linkcode AppWatchOptions.now}). */
  heardAt: number;
}

/** Options of {@linkcode AppWatch}. */
export interface AppWatchOptions {
  /** The app's port on 127.0.0.1: it runs while the port accepts (unless `lastcall exec` spoke). */
  port?: number;
  /** The clock, in milliseconds (tests pass their own). @default Date.now */
  now?: () => number;
  /** How long an app may stay silent before it is taken as gone. @default APP_LEASE_MS */
  leaseMs?: number;
}

/**
 * What lastcall knows of the apps beside it: each `lastcall exec` reports its app under its
 * own id, so a pod with two wrapped containers is done when both have exited. A report is a
 * lease: `lastcall exec` renews it every {@linkcode APP_RENEW_MS}; one silent for
 * {@linkcode APP_LEASE_MS} expires (`app_expired`), so a killed `lastcall exec` holds neither
 * a drain nor a slot.
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
  readonly #now: () => number;
  readonly #leaseMs: number;
  /** Apps `lastcall exec` said run, by report id. */
  readonly #running = new Map<string, Lease>();
  /** Whether any `lastcall exec` reported: then its word, not the port, says what runs. */
  #heard = false;
  /** Looks for silent apps while any is known to run (unref'd: it keeps no process alive). */
  #sweeper?: ReturnType<typeof setInterval>;
  /** Told when the last app `lastcall exec` knew of has gone. */
  readonly #goneListeners = new Set<(via: string) => void>();

  constructor(options: AppWatchOptions, log: EventLog) {
    this.#port = options.port;
    this.#log = log;
    this.#now = options.now ?? Date.now;
    this.#leaseMs = options.leaseMs ?? APP_LEASE_MS;
  }

  /**
   * `lastcall exec` says an app runs, or has exited.
   *
   * @returns false when the report was refused: a new app beyond {@linkcode MAX_APPS}
   */
  report(report: AppReport): boolean {
    const id = report.id ?? "app";
    this.expire();
    if (report.state === "running") {
      const known = this.#running.get(id);
      if (known) {
        known.heardAt = this.#now(); // a renewal
        return true;
      }
      if (this.#running.size >= MAX_APPS) return false;
      this.#running.set(id, { pid: report.pid, heardAt: this.#now() });
      this.#sweep();
    } else if (!this.#running.delete(id) && this.#heard) {
      return true;
    }
    this.#heard = true;
    this.#log(report.state === "running" ? "app_running" : "app_exited", {
      pid: report.pid,
      status: report.status,
      via: "lastcall exec",
      running: this.#running.size,
    });
    if (report.state === "exited" && this.#running.size === 0) this.#tellGone("lastcall exec");
    return true;
  }

  /**
   * Calls `listener` each time the last app `lastcall exec` said runs has gone (exited, or its
   * lease expired).
   *
   * @returns Stops telling it
   */
  onGone(listener: (via: string) => void): () => void {
    this.#goneListeners.add(listener);
    return () => this.#goneListeners.delete(listener);
  }

  /** Whether `lastcall exec` spoke and every app it said runs has gone (never a port alone). */
  gone(): boolean {
    this.expire();
    return this.#heard && this.#running.size === 0;
  }

  #tellGone(via: string): void {
    for (const listener of [...this.#goneListeners]) listener(via);
  }

  /**
   * Forgets the apps not heard of for a lease, each with an `app_expired` line naming its id,
   * its pid and how long it was silent. Called on every report and look, and every second while
   * an app runs.
   */
  expire(): void {
    const now = this.#now();
    let expired = false;
    for (const [id, lease] of this.#running) {
      const silentMs = now - lease.heardAt;
      if (silentMs < this.#leaseMs) continue;
      this.#running.delete(id);
      expired = true;
      this.#log("app_expired", {
        id,
        pid: lease.pid,
        silent_ms: silentMs,
        via: "lastcall exec",
        running: this.#running.size,
      });
    }
    if (expired && this.#running.size === 0) this.#tellGone("lastcall exec (lease expired)");
    if (this.#running.size === 0 && this.#sweeper !== undefined) {
      clearInterval(this.#sweeper);
      this.#sweeper = undefined;
    }
  }

  /** Starts looking for silent apps every second, if not yet. */
  #sweep(): void {
    if (this.#sweeper !== undefined) return;
    this.#sweeper = setInterval(() => this.expire(), Math.min(1000, this.#leaseMs)).unref();
  }

  /** The apps `lastcall exec` said run (not one known only by its port), for `/v1/state`. */
  apps(): Array<{ id: string; pid?: number }> {
    return [...this.#running].map((
      [id, lease],
    ) => (lease.pid === undefined ? { id } : { id, pid: lease.pid }));
  }

  /**
   * Whether a termination would wait for an app here: `lastcall exec` said one runs, or the app's
   * port is watched (no `lastcall exec` heard).
   */
  watched(): boolean {
    this.expire();
    return this.#running.size > 0 || (!this.#heard && this.#port !== undefined);
  }

  /** Whether an app is known to run now. */
  async running(): Promise<boolean> {
    if (!this.watched()) return false;
    return this.#running.size > 0 || await accepts(this.#port!);
  }

  /** Waits until no app runs; resolves false at once if none was running. */
  async waitGone(signal: AbortSignal): Promise<boolean> {
    if (!await this.running()) return false;
    const viaExec = this.#running.size > 0;
    this.#log("app_wait", {
      via: viaExec ? "lastcall exec" : `port ${this.#port}`,
      ...(viaExec ? { running: this.#running.size } : {}),
    });
    while (await this.running()) await delay(APP_POLL_MS, signal);
    if (!viaExec) this.#log("app_exited", { via: `port ${this.#port}` });
    return true;
  }
}
