// The agent's view of the filter's reports: each epoch's in-flight count, reported as a hint and
// pulled as the truth (docs/architecture.md, docs/filter-protocol.md).
import { type HoldersReport, parseHolders } from "./holders.ts";

/** One report of the filter, as posted to `/v1/inflight`. */
export interface InflightReport {
  instance: string;
  epoch: number;
  /** The process-wide count, read when the report was composed. */
  inflight: number;
  draining: boolean;
  /** The VM knows of the drain but was told its floor holds: it pushes nothing yet. */
  quiet?: boolean;
  reason: string;
  /** The probe this report answers (reason `probe`). */
  probe?: number;
  /** The worker VM that sent it (its start time in ns, as a decimal string), when the filter says. */
  vm?: string;
  /** Its oldest live streams (reason `holders`), asked for during a drain only. */
  holders?: HoldersReport;
}

/** A pulled count: the answer to one probe. */
export interface Pulled {
  /** The probe id; answers of later probes were read after it was asked. */
  probe: number;
  inflight: number;
  /** When the answer arrived, in ms since the epoch. */
  at: number;
}

/** The latest state known of one reporter: the HTTP or the TCP filter of one epoch. */
export interface ReporterView {
  instance: string;
  epoch: number;
  /** The count of the latest report to arrive (a hint: reports may arrive out of order). */
  inflight: number;
  /** The answer of the latest probe, when one was answered. */
  pulled?: Pulled;
  /** When the latest report arrived, in ms since the epoch. */
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
  if (typeof body !== "object" || body === null) {
    throw new TypeError("Report must be a JSON object");
  }
  const r = body as Record<string, unknown>;
  const int = (key: string) => {
    const v = r[key];
    if (typeof v !== "number" || !Number.isInteger(v) || v < 0 || v > MAX_COUNT) {
      throw new TypeError(`Report field ${key} is not a count: ${JSON.stringify(v)?.slice(0, 40)}`);
    }
    return v;
  };
  if (typeof r.instance !== "string" || r.instance.length > 200) {
    throw new TypeError(
      `Report field instance is not a short string: ${JSON.stringify(r.instance)?.slice(0, 40)}`,
    );
  }
  const report: InflightReport = {
    instance: r.instance,
    epoch: int("epoch"),
    inflight: int("inflight"),
    draining: r.draining === true,
    ...(r.quiet === true ? { quiet: true } : {}),
    reason: typeof r.reason === "string" ? r.reason.slice(0, 40) : "unknown",
  };
  if (r.probe !== undefined) report.probe = int("probe");
  if (r.vm !== undefined) {
    if (typeof r.vm !== "string" || !/^\d{1,20}$/.test(r.vm)) {
      throw new TypeError(`Report field vm is not a VM id: ${JSON.stringify(r.vm)?.slice(0, 40)}`);
    }
    report.vm = r.vm;
  }
  const holders = parseHolders(r);
  if (holders) report.holders = holders;
  return report;
}

/**
 * Keeps the latest report of each live Envoy process, pulls fresh counts from the filters, and
 * tells when all have reached a pulled zero. Reports of processes the agent did not register are
 * answered by the caller but leave no state here, so nothing on the status port can grow the
 * agent's memory.
 *
 * A pull wants a probe for an instance: the answer to the next report of that instance carries a
 * probe id, and the filter answers it with the gauge read then. A pull is done by the answer to a
 * probe issued after it began: that read was made after the pull began. A zero wait begins with a
 * pull, and every zero hint (a report saying 0) that arrives while it waits starts another, so
 * the move to zero that ends a drain is always read afresh.
 *
 * @example
 * ```ts
 * const tracker = new InflightTracker();
 * tracker.expect("a");
 * const zero = tracker.waitForZero(["a"], AbortSignal.timeout(10_000));
 * const probe = tracker.probeFor("a")!; // answered to the filter, which reports back:
 * tracker.report({ instance: "a", epoch: 0, inflight: 0, draining: true, reason: "probe", probe });
 * await zero;
 * ```
 */
export class InflightTracker {
  readonly #views = new Map<string, ReporterView | undefined>();
  readonly #listeners = new Set<() => void>();
  /** Instances a probe is wanted for, with the lowest probe id that satisfies the want. */
  readonly #wanted = new Map<string, number>();
  /** Instances a zero wait watches (count of waits): their zero hints start a pull. */
  readonly #watched = new Map<string, number>();
  readonly #probeWanted = new Set<(instance: string) => void>();
  readonly #heartbeatMs: number;
  readonly #now: () => number;
  #nextProbe = 1;
  /** Probe answers that arrived after the answer of a later probe (reordered), or answer a probe never issued: ignored. */
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

  /** Records a report; an unknown one, or a probe answer older than one seen or never issued, changes nothing. */
  report(report: InflightReport): ReportOutcome {
    if (!this.#views.has(report.instance)) {
      this.unknownReports++;
      return "unknown";
    }
    const known = this.#views.get(report.instance);
    const at = this.#now();
    const probe = report.reason === "probe" ? report.probe ?? 0 : 0;
    // An answer to a probe never issued (ids are handed out in order) proves no read after any
    // wait began: taken, it could end a wait and make every later real answer look stale.
    if (probe > 0 && (probe >= this.#nextProbe || (known?.pulled && probe < known.pulled.probe))) {
      this.staleReports++;
      return "stale";
    }
    const view: ReporterView = {
      instance: report.instance,
      epoch: report.epoch,
      inflight: report.inflight,
      reportedAt: at,
      reports: (known?.reports ?? 0) + 1,
      ...(probe > 0
        ? { pulled: { probe, inflight: report.inflight, at } }
        : known?.pulled
        ? { pulled: known.pulled }
        : {}),
    };
    this.#views.set(report.instance, view);
    const want = this.#wanted.get(report.instance);
    if (probe > 0 && want !== undefined && probe >= want) this.#wanted.delete(report.instance);
    // A zero hint while a wait watches: read it afresh (the hint may predate a later move).
    if (probe === 0 && report.inflight === 0 && this.#watched.has(report.instance)) {
      this.#want(report.instance);
    }
    this.#notify();
    return "accepted";
  }

  /**
   * A probe id for the answer to a report of `instance`, when a pull of it is under way; each
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
  view(instance: string): ReporterView | undefined {
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

  // Wants a probe of `instance` issued from now on.
  #want(instance: string): void {
    if (!this.#views.has(instance)) return;
    this.#wanted.set(instance, this.#nextProbe);
    for (const listener of [...this.#probeWanted]) listener(instance);
  }

  // Resolves with `settled()` once it returns a value after any report, or rejects on abort.
  #until<T>(signal: AbortSignal, settled: () => T | undefined, cleanup: () => void): Promise<T> {
    return new Promise((resolve, reject) => {
      const done = (value?: T, error?: unknown) => {
        this.#listeners.delete(check);
        signal.removeEventListener("abort", onAbort);
        cleanup();
        error === undefined ? resolve(value as T) : reject(error);
      };
      const onAbort = () => done(undefined, signal.reason ?? new Error("Aborted"));
      const check = () => {
        const value = settled();
        if (value !== undefined) done(value);
      };
      if (signal.aborted) return onAbort();
      signal.addEventListener("abort", onAbort, { once: true });
      this.#listeners.add(check);
      check();
    });
  }

  /**
   * Pulls the count of every given live process afresh: resolves with their sum, each read after
   * this call (an exited process counts 0). O(1) in Envoy's configuration: one gauge read by the
   * filter, no walk of Envoy's stats. Rejects with the signal's reason when aborted.
   */
  pull(instances: readonly string[], signal: AbortSignal): Promise<number> {
    const floor = this.#nextProbe;
    const fresh = (id: string) => {
      const pulled = this.#views.get(id)?.pulled;
      return pulled !== undefined && pulled.probe >= floor ? pulled : undefined;
    };
    for (const id of instances) this.#want(id);
    return this.#until(signal, () => {
      let total = 0;
      for (const id of instances) {
        if (!this.#views.has(id)) continue; // exited
        const pulled = fresh(id);
        if (!pulled) return undefined;
        total += pulled.inflight;
      }
      return total;
    }, () => {});
  }

  /**
   * Resolves when every given process stands at a pulled zero read after this call, or has
   * exited; a process that has not reported yet is waited for. Rejects with the signal's reason
   * when aborted.
   */
  waitForZero(instances: readonly string[], signal: AbortSignal): Promise<void> {
    const floor = this.#nextProbe;
    for (const id of instances) {
      this.#watched.set(id, (this.#watched.get(id) ?? 0) + 1);
      this.#want(id);
    }
    return this.#until(signal, () => {
      for (const id of instances) {
        if (!this.#views.has(id)) continue; // exited
        const pulled = this.#views.get(id)?.pulled;
        if (!pulled || pulled.probe < floor || pulled.inflight !== 0) return undefined;
      }
      return true;
    }, () => {
      for (const id of instances) {
        const n = (this.#watched.get(id) ?? 1) - 1;
        if (n > 0) this.#watched.set(id, n);
        else this.#watched.delete(id);
      }
    }).then(() => {});
  }
}
