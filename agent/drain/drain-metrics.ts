// How every drain ended, and the drains under way, as the metrics `/metrics` shows
// (docs/architecture.md, docs/operations.md).
import { Counter, Gauge, Histogram, type Registry } from "prom-client";

/**
 * What a drain was: `termination` (SIGTERM, SIGINT, SIGQUIT, `POST /quitquitquit`), `reload` (the
 * old Envoy of a reload finishing its requests, drain/old-epochs.ts), `drain` (`POST /drain`:
 * drain without exiting; Envoy runs on).
 */
export type DrainKind = "termination" | "reload" | "drain";

/** Every {@linkcode DrainKind}. */
export const DRAIN_KINDS: readonly DrainKind[] = ["termination", "reload", "drain"];

/** How one drain ended. */
export interface DrainOutcome {
  kind: DrainKind;
  /** Why it ended, as its log line says (`inflight_zero`, `deadline`, `envoy_exited`, …). */
  reason: string;
  /** From its start to its end (the stop of Envoy for a termination), ms. */
  drainMs: number;
  /** Requests in flight when Envoy was stopped (0 for `drain`: Envoy runs on). */
  inflightAtStop: number;
  /** Response bytes not yet delivered at the stop, when known. */
  bytesUnsent?: number;
  /** From the wait's last reading of zero to the stop of Envoy; only for drains that ended on zero and stopped an Envoy. */
  lastZeroToStopMs?: number;
}

/** What the drain code does with a drain it started. */
export interface DrainUnderWay {
  /**
   * Says how it ended (observed once; later calls are ignored), or, without an outcome, that it
   * ended without one (aborted: another drain took over).
   */
  ended(outcome?: Omit<DrainOutcome, "kind">): void;
}

/** Buckets of `lastcall_drain_duration_seconds`: a drain ends within ms on an idle Envoy, by its deadline (30 s by default; a reload's 10 min) otherwise. */
export const DRAIN_SECONDS_BUCKETS = [
  0.05,
  0.1,
  0.25,
  0.5,
  1,
  2.5,
  5,
  10,
  15,
  20,
  30,
  45,
  60,
  120,
  300,
  600,
];

/** Buckets of `lastcall_drain_last_response_to_stop_seconds`: lastcall stops Envoy within ms of the last zero. */
export const LAST_ZERO_SECONDS_BUCKETS = [
  0.001,
  0.0025,
  0.005,
  0.01,
  0.025,
  0.05,
  0.1,
  0.25,
  0.5,
  1,
  2.5,
  5,
];

/** Options of {@linkcode DrainMetrics}. */
export interface DrainMetricsOptions {
  /** The clock, ms since the epoch. @default Date.now */
  now?: () => number;
}

interface Running {
  kind: DrainKind;
  deadline: () => number;
  done: boolean;
}

/**
 * The instruments of how drains end, and the drains under way.
 *
 * @example
 * ```ts
 * const drains = new DrainMetrics();
 * drains.register(registry); // the registry behind /metrics
 * const drain = drains.started("reload", () => plan.deadline);
 * drain.ended({ reason: "inflight_zero", drainMs: 1200, inflightAtStop: 0, bytesUnsent: 0 });
 * ```
 */
export class DrainMetrics {
  readonly #now: () => number;
  readonly #running = new Set<Running>();
  readonly #duration = new Histogram({
    name: "lastcall_drain_duration_seconds",
    help:
      "How long drains took, from their start to their end (a termination's: the stop of Envoy), by kind and why they ended",
    labelNames: ["kind", "reason"],
    buckets: DRAIN_SECONDS_BUCKETS,
    registers: [],
  });
  readonly #requestsCut = new Counter({
    name: "lastcall_requests_cut_total",
    help: "Requests in flight when a drain's Envoy was stopped (a POST /drain stops none: 0)",
    labelNames: ["kind"],
    registers: [],
  });
  readonly #bytesCut = new Counter({
    name: "lastcall_response_bytes_cut_total",
    help:
      "Response bytes not yet delivered to clients when a drain's Envoy was stopped, where /proc tells",
    labelNames: ["kind"],
    registers: [],
  });
  readonly #lastZeroToStop = new Histogram({
    name: "lastcall_drain_last_response_to_stop_seconds",
    help:
      "From the drain's last reading of zero in flight (every response delivered) to the stop of Envoy, for drains that ended on zero",
    labelNames: ["kind"],
    buckets: LAST_ZERO_SECONDS_BUCKETS,
    registers: [],
  });
  readonly #draining: Gauge;
  readonly #secondsLeft: Gauge;

  constructor(options: DrainMetricsOptions = {}) {
    this.#now = options.now ?? Date.now;
    for (const kind of DRAIN_KINDS) {
      this.#requestsCut.inc({ kind }, 0);
      this.#bytesCut.inc({ kind }, 0);
      this.#lastZeroToStop.zero({ kind });
    }
    const running = this.#running;
    const now = this.#now;
    this.#draining = new Gauge({
      name: "lastcall_draining",
      help:
        "1 while a drain of this kind runs (from its start to its end: a termination's until lastcall exits)",
      labelNames: ["kind"],
      registers: [],
      collect() {
        for (const kind of DRAIN_KINDS) {
          this.set(
            { kind },
            [...running].some((r) => r.kind === kind) ? 1 : 0,
          );
        }
      },
    });
    this.#secondsLeft = new Gauge({
      name: "lastcall_drain_seconds_left",
      help:
        "While a drain of this kind runs: seconds left to its deadline (0 once reached); absent otherwise",
      labelNames: ["kind"],
      registers: [],
      collect() {
        this.reset();
        for (const kind of DRAIN_KINDS) {
          const deadlines = [...running].filter((r) => r.kind === kind).map((r) => r.deadline());
          if (deadlines.length > 0) {
            this.set({ kind }, Math.max(0, Math.min(...deadlines) - now()) / 1000);
          }
        }
      },
    });
  }

  /** Adds every instrument to `registry`. */
  register(registry: Registry): void {
    for (
      const metric of [
        this.#duration,
        this.#requestsCut,
        this.#bytesCut,
        this.#lastZeroToStop,
        this.#draining,
        this.#secondsLeft,
      ]
    ) {
      registry.registerMetric(metric);
    }
  }

  /**
   * A drain of `kind` began; `deadline()` (ms since the epoch) is read at each scrape, so a
   * deadline moved later is followed. A termination takes over a `POST /drain` under way (the
   * same drain goes on, see Drainer.begin): that one then ends without an outcome.
   *
   * @throws {RangeError} naming `kind` when it is no {@linkcode DrainKind}
   */
  started(kind: DrainKind, deadline: () => number): DrainUnderWay {
    if (!DRAIN_KINDS.includes(kind)) {
      throw new RangeError(
        `drain kind must be one of ${DRAIN_KINDS.join(", ")}, not ${JSON.stringify(kind)}`,
      );
    }
    if (kind === "termination") {
      for (const r of this.#running) if (r.kind === "drain") this.#finish(r);
    }
    const running: Running = { kind, deadline, done: false };
    this.#running.add(running);
    return {
      ended: (outcome) => {
        if (running.done) return;
        this.#finish(running);
        if (outcome) this.observe({ kind, ...outcome });
      },
    };
  }

  /**
   * Observes how one drain ended (what {@linkcode DrainUnderWay.ended} does). Durations below 0
   * (a wall clock stepped back) count as 0.
   *
   * @throws {RangeError} naming the value: an unknown kind, or a count that is negative or not a whole number
   */
  observe(outcome: DrainOutcome): void {
    const { kind, reason } = outcome;
    if (!DRAIN_KINDS.includes(kind)) {
      throw new RangeError(
        `drain kind must be one of ${DRAIN_KINDS.join(", ")}, not ${JSON.stringify(kind)}`,
      );
    }
    if (typeof reason !== "string" || reason === "") {
      throw new RangeError(
        `drain reason must be a non-empty string, not ${JSON.stringify(reason)}`,
      );
    }
    count("inflightAtStop", outcome.inflightAtStop);
    if (outcome.bytesUnsent !== undefined) count("bytesUnsent", outcome.bytesUnsent);
    this.#duration.observe({ kind, reason }, seconds(outcome.drainMs));
    this.#requestsCut.inc({ kind }, outcome.inflightAtStop);
    if (outcome.bytesUnsent !== undefined) this.#bytesCut.inc({ kind }, outcome.bytesUnsent);
    if (outcome.lastZeroToStopMs !== undefined) {
      this.#lastZeroToStop.observe({ kind }, seconds(outcome.lastZeroToStopMs));
    }
  }

  #finish(running: Running): void {
    running.done = true;
    this.#running.delete(running);
  }
}

function count(name: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new RangeError(`${name} must be a whole number of at least 0, not ${value}`);
  }
}

function seconds(ms: number): number {
  return Number.isFinite(ms) ? Math.max(0, ms) / 1000 : 0;
}
