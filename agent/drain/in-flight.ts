// The agent's view of the filter's reports (docs/filter-protocol.md). One Envoy process is one
// `instance`; each has its own sequence (the version of its shared-data counter), so a hot
// restart's parent and child are tracked side by side and a crash-restarted Envoy starts afresh.
// A pushed zero is only a candidate: it ends a drain once a probe (a fresh read of the counter
// that the agent asked for after the zero) says zero too, so a lost `busy` push can't end it.

/** One report of the filter, as posted to `/v1/inflight`. */
export interface InflightReport {
  instance: string;
  epoch: number;
  seq: number;
  inflight: number;
  draining: boolean;
  reason: string;
  /** The probe this report answers (reason `probe`). */
  probe?: number;
}

/** The latest state known of one Envoy process. */
export interface InstanceView {
  instance: string;
  epoch: number;
  seq: number;
  inflight: number;
  /** The latest report was composed by a filter that knew the agent is draining. */
  drainingAcked: boolean;
  /** Highest probe id whose fresh read saw this state at zero; 0 when none did. */
  confirmedBy: number;
  /** When the latest report (or a repeat of it) arrived, in ms since the epoch. */
  reportedAt: number;
  reports: number;
}

/** What became of one report. */
export type ReportOutcome = "accepted" | "stale" | "unknown";

/** Whether a filter is heard from: never, recently, or not for a while. */
export type FilterStatus = "never" | "reporting" | "silent";

/** Options of {@linkcode InflightTracker}. */
export interface InflightTrackerOptions {
  /** Heartbeat period; three missed heartbeats make a filter `silent`. @default 1000 */
  heartbeatMs?: number;
  /** Clock, replaceable in tests. @default Date.now */
  now?: () => number;
}

/** Largest value a report's counts may take (a JSON number that is still an exact integer). */
const MAX_COUNT = Number.MAX_SAFE_INTEGER;

/** Parses and checks a report body; throws a message naming the bad field. */
export function parseReport(body: unknown): InflightReport {
  if (typeof body !== "object" || body === null) throw new TypeError("Report must be a JSON object");
  const r = body as Record<string, unknown>;
  const int = (key: string) => {
    const v = r[key];
    if (typeof v !== "number" || !Number.isInteger(v) || v < 0 || v > MAX_COUNT) {
      throw new TypeError(`Report field ${key} is not a count: ${JSON.stringify(v)?.slice(0, 40)}`);
    }
    return v;
  };
  if (typeof r.instance !== "string" || r.instance.length > 200) {
    throw new TypeError(`Report field instance is not a short string: ${JSON.stringify(r.instance)?.slice(0, 40)}`);
  }
  const report: InflightReport = {
    instance: r.instance,
    epoch: int("epoch"),
    seq: int("seq"),
    inflight: int("inflight"),
    draining: r.draining === true,
    reason: typeof r.reason === "string" ? r.reason.slice(0, 40) : "unknown",
  };
  if (r.probe !== undefined) report.probe = int("probe");
  return report;
}

/**
 * Keeps the latest report of each live Envoy process and tells when all have reached a
 * confirmed zero. Reports of processes the agent did not register are answered by the caller
 * but leave no state here, so nothing on the status port can grow the agent's memory.
 *
 * A zero is a candidate when (1) it comes from a report composed while the filter knew the agent
 * is draining, because from then on the filter pushes every move away from zero at once, and
 * (2) it carries the highest sequence seen, so a reordered older report cannot fake it. It is
 * confirmed by a probe: the agent answers one of that filter's reports with a probe id, the filter
 * reads its counter afresh and reports it. Only probes issued after the wait began count.
 *
 * @example
 * ```ts
 * const tracker = new InflightTracker();
 * tracker.expect("a", 0);
 * tracker.report({ instance: "a", epoch: 0, seq: 3, inflight: 0, draining: true, reason: "zero" });
 * const probe = tracker.probeFor("a"); // answered to the filter, which reports back:
 * tracker.report({ instance: "a", epoch: 0, seq: 3, inflight: 0, draining: true, reason: "probe", probe });
 * await tracker.waitForZero(["a"], AbortSignal.timeout(10_000));
 * ```
 */
export class InflightTracker {
  readonly #views = new Map<string, InstanceView | undefined>();
  readonly #listeners = new Set<() => void>();
  /** Instances whose zero candidate awaits a probe, with the lowest probe id that counts. */
  readonly #wanted = new Map<string, number>();
  readonly #probeWanted = new Set<(instance: string) => void>();
  readonly #heartbeatMs: number;
  readonly #now: () => number;
  #nextProbe = 1;
  /** Stale or reordered reports that were ignored. */
  staleReports = 0;
  /** Reports of processes that are not live (exited, or never started by this agent). */
  unknownReports = 0;

  constructor(options: InflightTrackerOptions = {}) {
    this.#heartbeatMs = options.heartbeatMs ?? 1000;
    this.#now = options.now ?? Date.now;
  }

  /** Registers a live Envoy process whose filter reports as `instance`. */
  expect(instance: string): void {
    if (!this.#views.has(instance)) this.#views.set(instance, undefined);
  }

  /** Forgets an Envoy process that has exited: nothing of its is left in flight. */
  retire(instance: string): void {
    this.#views.delete(instance);
    this.#wanted.delete(instance);
    this.#notify();
  }

  /** Whether `instance` is a registered live process. */
  isLive(instance: string): boolean {
    return this.#views.has(instance);
  }

  /** Records a report; a stale one (older than what is known) or an unknown one changes nothing. */
  report(report: InflightReport): ReportOutcome {
    if (!this.#views.has(report.instance)) {
      this.unknownReports++;
      return "unknown";
    }
    const known = this.#views.get(report.instance);
    const at = this.#now();
    if (known && report.seq < known.seq) {
      this.staleReports++;
      return "stale";
    }
    const fresh = report.reason === "probe" && report.draining && report.inflight === 0 ? report.probe ?? 0 : 0;
    if (known && report.seq === known.seq) {
      // Same counter state seen again (another worker's heartbeat, a probe): only freshness,
      // the draining acknowledgement and the confirmation can improve.
      known.reportedAt = at;
      known.reports++;
      known.drainingAcked ||= report.draining;
      known.confirmedBy = Math.max(known.confirmedBy, fresh);
    } else {
      this.#views.set(report.instance, {
        instance: report.instance,
        epoch: report.epoch,
        seq: report.seq,
        inflight: report.inflight,
        drainingAcked: report.draining,
        confirmedBy: fresh,
        reportedAt: at,
        reports: (known?.reports ?? 0) + 1,
      });
    }
    this.#notify();
    return "accepted";
  }

  /**
   * A probe id for the answer to a report of `instance`, when its zero awaits confirmation; each
   * call issues a new id (a lost probe is simply asked again with the next answer).
   */
  probeFor(instance: string): number | undefined {
    return this.#wanted.has(instance) ? this.#nextProbe++ : undefined;
  }

  /** Calls `listener` when a probe of `instance` becomes wanted (to release a held report). */
  onProbeWanted(listener: (instance: string) => void): () => void {
    this.#probeWanted.add(listener);
    return () => this.#probeWanted.delete(listener);
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

  #notify(): void {
    for (const listener of [...this.#listeners]) listener();
  }

  /**
   * Resolves when every given process stands at a zero confirmed by a probe issued after this
   * call, or has exited; a process that has not reported yet is waited for. Rejects with the
   * signal's reason when aborted.
   */
  waitForZero(instances: readonly string[], signal: AbortSignal): Promise<void> {
    const floor = this.#nextProbe;
    return new Promise((resolve, reject) => {
      const done = (error?: unknown) => {
        this.#listeners.delete(check);
        signal.removeEventListener("abort", onAbort);
        for (const id of instances) this.#wanted.delete(id);
        error === undefined ? resolve() : reject(error);
      };
      const onAbort = () => done(signal.reason ?? new Error("Aborted"));
      const check = () => {
        let all = true;
        for (const id of instances) {
          if (!this.#views.has(id)) continue; // exited
          const view = this.#views.get(id);
          const candidate = view !== undefined && view.drainingAcked && view.inflight === 0;
          if (candidate && view.confirmedBy >= floor) {
            this.#wanted.delete(id);
            continue;
          }
          all = false;
          if (!candidate) {
            this.#wanted.delete(id);
          } else if (!this.#wanted.has(id)) {
            this.#wanted.set(id, floor);
            for (const listener of [...this.#probeWanted]) listener(id);
          }
        }
        if (all) done();
      };
      if (signal.aborted) return onAbort();
      signal.addEventListener("abort", onAbort, { once: true });
      this.#listeners.add(check);
      check();
    });
  }
}
