// The agent's view of the filter's reports (docs/filter-protocol.md). One Envoy process is one
// `instance`; each has its own sequence (the version of its shared-data counter), so a hot
// restart's parent and child are tracked side by side and a crash-restarted Envoy starts afresh.

/** One report of the filter, as posted to `/v1/inflight`. */
export interface InflightReport {
  instance: string;
  epoch: number;
  seq: number;
  inflight: number;
  draining: boolean;
  reason: string;
}

/** The latest state known of one Envoy process. */
export interface InstanceView {
  instance: string;
  epoch: number;
  seq: number;
  inflight: number;
  /** The latest report was composed by a filter that knew the agent is draining. */
  drainingAcked: boolean;
  /** When the latest report (or a repeat of it) arrived, in ms since the epoch. */
  reportedAt: number;
  reports: number;
}

/** Whether a filter is heard from: never, recently, or not for a while. */
export type FilterStatus = "never" | "reporting" | "silent";

/** Options of {@linkcode InflightTracker}. */
export interface InflightTrackerOptions {
  /** How long a zero must stand with no later report before it counts. @default 50 */
  zeroConfirmMs?: number;
  /** Heartbeat period; three missed heartbeats make a filter `silent`. @default 1000 */
  heartbeatMs?: number;
  /** Clock, replaceable in tests. @default Date.now */
  now?: () => number;
}

/** Parses and checks a report body; throws a message naming the bad field. */
export function parseReport(body: unknown): InflightReport {
  if (typeof body !== "object" || body === null) throw new TypeError("Report must be a JSON object");
  const r = body as Record<string, unknown>;
  const int = (key: string) => {
    const v = r[key];
    if (typeof v !== "number" || !Number.isInteger(v) || v < 0) throw new TypeError(`Report field ${key} is not a count: ${JSON.stringify(v)}`);
    return v;
  };
  if (typeof r.instance !== "string") throw new TypeError(`Report field instance is not a string: ${JSON.stringify(r.instance)}`);
  return {
    instance: r.instance,
    epoch: int("epoch"),
    seq: int("seq"),
    inflight: int("inflight"),
    draining: r.draining === true,
    reason: typeof r.reason === "string" ? r.reason : "unknown",
  };
}

/**
 * Keeps the latest report per Envoy process and tells when one has reached a confirmed zero.
 *
 * A zero is real when (1) it comes from a report composed while the filter knew the agent is
 * draining, because from then on the filter pushes every move away from zero at once; (2) it
 * carries the highest sequence seen, so a reordered older report cannot fake it; and (3) no
 * later report arrives within `zeroConfirmMs`, which covers a request that starts just as the
 * last one ends: its `busy` report (a higher sequence) is already on its way.
 *
 * @example
 * ```ts
 * const tracker = new InflightTracker({ zeroConfirmMs: 50 });
 * tracker.report({ instance: "a", epoch: 0, seq: 3, inflight: 0, draining: true, reason: "zero" });
 * await tracker.waitForZero(["a"], AbortSignal.timeout(10_000));
 * ```
 */
export class InflightTracker {
  readonly #views = new Map<string, InstanceView>();
  /** Processes that exited: nothing of theirs is left in flight. */
  readonly #retired = new Set<string>();
  readonly #listeners = new Set<() => void>();
  readonly #zeroConfirmMs: number;
  readonly #heartbeatMs: number;
  readonly #now: () => number;
  /** Stale or reordered reports that were ignored. */
  staleReports = 0;

  constructor(options: InflightTrackerOptions = {}) {
    this.#zeroConfirmMs = options.zeroConfirmMs ?? 50;
    this.#heartbeatMs = options.heartbeatMs ?? 1000;
    this.#now = options.now ?? Date.now;
    if (this.#zeroConfirmMs < 0) throw new RangeError(`zeroConfirmMs must not be negative: ${this.#zeroConfirmMs}`);
  }

  /** Records a report; returns false when it was older than what is known (and ignored). */
  report(report: InflightReport): boolean {
    const known = this.#views.get(report.instance);
    const at = this.#now();
    if (known && report.seq < known.seq) {
      this.staleReports++;
      return false;
    }
    if (known && report.seq === known.seq) {
      // Same counter state seen again (another worker's heartbeat): only freshness and the
      // draining acknowledgement can improve.
      known.reportedAt = at;
      known.reports++;
      known.drainingAcked ||= report.draining;
    } else {
      this.#views.set(report.instance, {
        instance: report.instance,
        epoch: report.epoch,
        seq: report.seq,
        inflight: report.inflight,
        drainingAcked: report.draining,
        reportedAt: at,
        reports: (known?.reports ?? 0) + 1,
      });
    }
    for (const listener of this.#listeners) listener();
    return true;
  }

  /** Forgets an Envoy process that has exited. */
  retire(instance: string): void {
    this.#views.delete(instance);
    this.#retired.add(instance);
    for (const listener of this.#listeners) listener();
  }

  /** The latest view of one process, if it ever reported. */
  view(instance: string): InstanceView | undefined {
    return this.#views.get(instance);
  }

  /** Sum of the latest counts of the given processes (unknown ones count 0). */
  inflight(instances: Iterable<string>): number {
    let total = 0;
    for (const id of instances) total += this.#views.get(id)?.inflight ?? 0;
    return total;
  }

  /** Whether the filter in a process is heard from. */
  status(instance: string): FilterStatus {
    const view = this.#views.get(instance);
    if (!view) return "never";
    return this.#now() - view.reportedAt > 3 * this.#heartbeatMs ? "silent" : "reporting";
  }

  /** True when this process's latest report is a draining zero (not yet confirmed by time). */
  #zeroCandidate(instance: string): InstanceView | undefined {
    const view = this.#views.get(instance);
    return view && view.drainingAcked && view.inflight === 0 ? view : undefined;
  }

  /**
   * Resolves when every given process stands at a confirmed zero or has exited; a process
   * that has not reported yet is waited for. Rejects with the signal's reason when aborted.
   */
  waitForZero(instances: readonly string[], signal: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      let timer: ReturnType<typeof setTimeout> | undefined;
      let candidate = "";
      const done = (error?: unknown) => {
        clearTimeout(timer);
        this.#listeners.delete(check);
        signal.removeEventListener("abort", onAbort);
        error === undefined ? resolve() : reject(error);
      };
      const onAbort = () => done(signal.reason ?? new Error("Aborted"));
      const check = () => {
        const live = instances.filter((id) => !this.#retired.has(id));
        if (live.length === 0) return done();
        const views = live.map((id) => this.#zeroCandidate(id));
        if (views.some((v) => v === undefined)) {
          clearTimeout(timer);
          timer = undefined;
          candidate = "";
          return;
        }
        const key = views.map((v) => `${v!.instance}@${v!.seq}`).join(",");
        if (key === candidate) return;
        candidate = key;
        clearTimeout(timer);
        timer = setTimeout(() => {
          const still = live.map((id) => this.#zeroCandidate(id));
          if (still.every((v) => v) && still.map((v) => `${v!.instance}@${v!.seq}`).join(",") === candidate) done();
        }, this.#zeroConfirmMs);
      };
      if (signal.aborted) return onAbort();
      signal.addEventListener("abort", onAbort, { once: true });
      this.#listeners.add(check);
      check();
    });
  }
}
