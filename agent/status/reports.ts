// Answers the filter's reports, holding heartbeats as long polls so a filter learns of a drain in
// one round trip (docs/architecture.md, docs/filter-protocol.md).
import type { InflightReport, InflightTracker } from "../drain/in-flight.ts";
import { type HolderBook, MAX_HOLDERS } from "../drain/holders.ts";
import { reportTimeoutMs } from "../envoy/bootstrap.ts";

/** The agent's answer to one report. */
export interface ReportAnswer {
  /** Whether the reporting Envoy is being drained. */
  draining: boolean;
  /** During a drain whose floor holds: the VM is to push nothing yet. */
  quiet?: boolean;
  /** A probe id: the filter reads its counter afresh and reports it back. */
  probe?: number;
  /** During a drain: how many of its oldest live streams the VM should name (a `holders` report). */
  holders?: number;
  /** The id the VM is to give in its reports from now on (to a report that gave none). */
  vm?: string;
}

/** Options of {@linkcode ReportDesk}. */
export interface ReportDeskOptions {
  /** The filter's heartbeat period: heartbeats are held for 90 % of it. */
  heartbeatMs: number;
  /** Whether reports of `instance` should be told to drain. */
  draining(instance: string): boolean;
  /** Whether a drain of `instance` is still before its filters are to push. @default never */
  quiet?(instance: string): boolean;
  /** Where the VMs' holders are kept; without it none are asked for. */
  holders?: HolderBook;
}

interface Hold {
  release(probe?: number): void;
}

/** Reports held at once per instance; the oldest is answered when one more comes. */
export const MAX_HOLDS = 32;

/**
 * Answers reports, holding heartbeats as long polls.
 *
 * @example
 * ```ts
 * const desk = new ReportDesk(tracker, { heartbeatMs: 1000, draining: () => false });
 * const answer = await desk.answer(report); // { draining: false }
 * ```
 */
export class ReportDesk {
  readonly #tracker: InflightTracker;
  readonly #options: ReportDeskOptions;
  readonly #holds = new Map<string, Hold[]>();
  /** The instance whose report is being recorded: its own answer carries a probe it wants. */
  #answering?: string;
  /** The next VM id to give: unique among every VM of every Envoy of this agent. */
  #nextVm = 1;

  constructor(tracker: InflightTracker, options: ReportDeskOptions) {
    this.#tracker = tracker;
    this.#options = options;
    tracker.onProbeWanted((instance) => {
      if (instance !== this.#answering) this.#releaseOne(instance);
    });
  }

  /** Forgets a reporter whose epoch exited: nothing of its is left in flight, and its VMs name nothing. */
  retire(instance: string): void {
    this.#tracker.retire(instance);
    this.#options.holders?.forget(instance);
  }

  /** Records `report` and answers it, after a hold if there is nothing to say. */
  async answer(report: InflightReport): Promise<ReportAnswer> {
    const { instance } = report;
    this.#answering = instance;
    let outcome;
    try {
      outcome = this.#tracker.report(report);
    } finally {
      this.#answering = undefined;
    }
    if (outcome === "unknown") return { draining: this.#options.draining(instance) };
    const book = this.#options.holders;
    // A VM that has no id yet gets one with this answer (the first it takes is its own): the
    // holders of a drain are kept per VM.
    const named = book && report.vm === undefined ? { vm: String(this.#nextVm++) } : {};
    if (book && report.vm && report.holders) {
      book.record(instance, report.epoch, report.vm, report.holders);
    }
    let probe = this.#tracker.probeFor(instance);
    const wasDraining = this.#options.draining(instance);
    // A filter VM that does not know of the drain yet, or that it is to push now (its report
    // came after the held ones were released), is told at once: held, it would learn a
    // heartbeat period late.
    const uninformed = wasDraining &&
      (!report.draining || (report.quiet === true && !this.#quiet(instance)));
    if (probe === undefined && !uninformed) probe = await this.#hold(instance, wasDraining);
    const draining = this.#options.draining(instance);
    const quiet = draining && this.#quiet(instance) ? { quiet: true } : {};
    // While a drain waits, each VM names what holds it about once a second, asked in an answer.
    if (draining && book && report.vm && book.wants(instance, report.vm)) {
      return { draining, ...quiet, probe, holders: MAX_HOLDERS, ...named };
    }
    return { draining, ...quiet, probe, ...named };
  }

  /**
   * A drain began, or its filters are to push now: answer every held heartbeat at once, so every
   * filter learns of it in one round trip.
   */
  tellFilters(): void {
    for (const instance of [...this.#holds.keys()]) {
      // A copy: each release removes its hold from the list (iterating the list itself skipped every other one).
      for (const hold of [...this.#holds.get(instance) ?? []]) {
        hold.release(this.#tracker.probeFor(instance));
      }
    }
  }

  /** Holds a report for 90 % of the heartbeat period (never longer than the filter waits). */
  #hold(instance: string, draining: boolean): Promise<number | undefined> {
    const holdMs = Math.min(
      this.#options.heartbeatMs * 0.9,
      reportTimeoutMs(this.#options.heartbeatMs) - 500,
    );
    return new Promise((resolve) => {
      const list = this.#holds.get(instance) ?? [];
      this.#holds.set(instance, list);
      const timer = setTimeout(() => hold.release(), holdMs);
      const hold: Hold = {
        release: (probe) => {
          clearTimeout(timer);
          const at = list.indexOf(hold);
          if (at >= 0) list.splice(at, 1);
          if (list.length === 0 && this.#holds.get(instance) === list) this.#holds.delete(instance);
          resolve(probe);
        },
      };
      list.push(hold);
      if (list.length > MAX_HOLDS) list[0]!.release();
      // A drain that began between the report and the hold must not wait for the timer.
      if (!draining && this.#options.draining(instance)) {
        hold.release(this.#tracker.probeFor(instance));
      }
    });
  }

  #quiet(instance: string): boolean {
    return this.#options.quiet?.(instance) ?? false;
  }

  /** Answers one held heartbeat of `instance` with a fresh probe. */
  #releaseOne(instance: string): void {
    const hold = this.#holds.get(instance)?.[0];
    if (hold) hold.release(this.#tracker.probeFor(instance));
  }
}
