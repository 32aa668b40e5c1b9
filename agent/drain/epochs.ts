// What a drain needs of the live epochs, behind one interface: have them drain their listeners,
// count what they have in flight, read what they still have to deliver, and stop them.
import type { AdminClient } from "../envoy/admin.ts";
import { describeExit, stopEnvoy } from "../envoy/process.ts";
import type { Undelivered } from "../envoy/sockets.ts";
import { activeRequests, GAUGE_NAMES, isInflightGauge, parseStatsJson } from "../envoy/stats.ts";
import { delay } from "../lib/async.ts";
import type { EventLog } from "../lib/log.ts";
import type { RunOptions } from "../options.ts";
import type { Envoys, Epoch } from "../supervise/envoys.ts";
import { undeliveredBy } from "./delivery.ts";
import { countsOutbound, InboundCloser, inboundInflight } from "./inbound.ts";
import type { InflightTracker } from "./in-flight.ts";
import type { ModeContext } from "./modes/context.ts";
import type { DrainPlan } from "./plan.ts";
import { retryAdmin } from "./shutdown.ts";

/** What a drain needs of the live epochs (one Envoy process each). */
export interface DrainedEpochs {
  /** The epochs whose process still runs, oldest first. */
  running(): Epoch[];
  /** Has each ready epoch of `which` (all by default) drain its listeners, once; retried until it answers or exits. */
  drainListeners(plan: DrainPlan, which?: readonly Epoch[]): void;
  /** Requests in flight now, read afresh from Envoy (its filters, or its stats); undefined when it cannot be told. */
  measure(signal: AbortSignal, reporters?: string[]): Promise<number | undefined>;
  /** What the filters of `reporters` (every running epoch's by default) last reported: a hint only. */
  reported(reporters?: string[]): number;
  /** Response bytes the epochs still have to deliver on accepted connections; undefined when /proc cannot tell. */
  undelivered(prefixes?: ReadonlySet<string>): Promise<Undelivered | undefined>;
  /** Marks `which` as asked to stop (their exit is no crash) and stops them, each within `budgetMs`. */
  stop(which: readonly Epoch[], budgetMs: number, options?: { byAdmin?: boolean }): Promise<void>;
}

/** An epoch that exited by itself during the termination: what it had in flight, how it ended. */
export interface DiedDraining {
  inflight: number;
  exit: string;
}

/**
 * Notes each running epoch that exits without being asked to stop (killed under a drain), with
 * what its filters last said it had in flight; `note()` again adds epochs started since.
 */
export function noteUnaskedExits(epochs: DrainedEpochs): { list: DiedDraining[]; note(): void } {
  const list: DiedDraining[] = [];
  const noted = new WeakSet<Epoch>();
  const note = () => {
    for (const l of epochs.running().filter((l) => !noted.has(l))) {
      noted.add(l);
      void l.process.exited.then((exit) => {
        if (!l.stopAsked) {
          list.push({ inflight: epochs.reported(l.reporters), exit: describeExit(exit) });
        }
      });
    }
  };
  note();
  return { list, note };
}

/**
 * Epochs that never served (the first still INITIALIZING, a crash restart starting) are stopped
 * at once: they took no traffic. A hot-restart child that is not ready is left alone until its
 * parent is drained: stopping it makes the parent exit too (Envoy's hot-restart shutdown).
 *
 * @example
 * ```ts
 * await stopUnready(log, epochs, plan); // the termination's step 2
 * ```
 */
export async function stopUnready(
  log: EventLog,
  epochs: DrainedEpochs,
  plan: DrainPlan,
): Promise<void> {
  const all = epochs.running();
  await Promise.all(
    all.filter((l) => !l.ready && l.admin).map(async (l) => {
      if ((await l.admin!.readiness(250)).live) l.ready = true; // it became ready just now
    }),
  );
  epochs.drainListeners(plan, all);
  const unready = all.filter((l) => !l.ready);
  if (unready.length === 0) return;
  if (all.some((l) => l.ready)) {
    log("unready_epoch_kept", {
      epochs: unready.map((l) => l.info.epoch),
      why: "stopping it would stop the serving parent; it stops after the drain",
    });
    return;
  }
  log("stopping_unready", {
    epochs: unready.map((l) => l.info.epoch),
    pids: unready.map((l) => l.info.pid),
  });
  await epochs.stop(unready, 1000, { byAdmin: false });
}

/** What {@linkcode LiveEpochs} reads. */
export interface LiveEpochsDeps {
  options: RunOptions;
  log: EventLog;
  envoys: Envoys;
  tracker: InflightTracker;
  /** Aborts when lastcall closes: admin calls still retried give up. */
  closing: AbortSignal;
}

/**
 * Requests in flight now, counted within `ms`; when no count comes, what the filters last
 * reported (a hint only: a VM's earlier report can arrive after its later one).
 *
 * @example
 * ```ts
 * const inflight = await countNow(epochs, 500); // 0
 * ```
 */
export function countNow(epochs: DrainedEpochs, ms: number, reporters?: string[]): Promise<number> {
  return epochs.measure(AbortSignal.timeout(ms), reporters).catch(() => undefined).then((n) =>
    n ?? epochs.reported(reporters)
  );
}

/**
 * For one epoch: fail its health check (when planned), wait `--drain-delay`, then start Envoy's
 * graceful drain of its listeners. Admin calls that fail are retried until `signal` aborts (the
 * deadline): a busy Envoy is asked again, never given up on.
 */
export async function drainListeners(
  plan: DrainPlan,
  admin: AdminClient,
  log: EventLog,
  signal: AbortSignal,
  options: { healthcheck?: boolean; delay?: boolean } = {},
): Promise<boolean> {
  if (plan.failHealthcheck && options.healthcheck !== false) {
    if (!await retryAdmin("healthcheck/fail", (s) => admin.failHealthcheck(s), signal, log)) {
      return false;
    }
    log("healthcheck_failed");
  }
  if (plan.drainDelayMs > 0 && options.delay !== false) {
    log("drain_delay", { ms: plan.drainDelayMs });
    try {
      await delay(plan.drainDelayMs - (Date.now() - plan.startedAt), signal);
    } catch {
      return false;
    }
  }
  if (
    !await retryAdmin(
      "drain_listeners",
      (s) => admin.drainListeners(plan.scope, s),
      signal,
      log,
    )
  ) return false;
  log("listeners_draining", { scope: plan.scope, admin: admin.url });
  return true;
}

/**
 * The live epochs as a drain sees them, and their inbound side for the app's preStop.
 *
 * @example
 * ```ts
 * const epochs = new LiveEpochs({ options, log, envoys, tracker, closing });
 * epochs.drainListeners(plan);
 * await epochs.stop(epochs.running(), 2000);
 * ```
 */
export class LiveEpochs implements DrainedEpochs {
  readonly #deps: LiveEpochsDeps;
  readonly #inbound: InboundCloser;

  constructor(deps: LiveEpochsDeps) {
    this.#deps = deps;
    this.#inbound = new InboundCloser(deps.log, deps.closing);
  }

  running(): Epoch[] {
    return this.#deps.envoys.all().filter((l) => l.process.running);
  }

  drainListeners(plan: DrainPlan, which: readonly Epoch[] = this.#deps.envoys.all()): void {
    for (const live of which) this.#drainListenersOf(plan, live);
  }

  #drainListenersOf(plan: DrainPlan, live: Epoch): void {
    const { log, closing } = this.#deps;
    if (this.#inbound.closed) void this.#inbound.closeOn(live);
    if (!live.ready || live.listenersDraining) return;
    live.listenersDraining = true;
    if (!live.admin || live.adminHandedOver) {
      log("listeners_not_drained", {
        epoch: live.info.epoch,
        pid: live.info.pid,
        why: "its admin went to a hot-restart child",
      });
      return;
    }
    const gone = new AbortController();
    live.process.exited.then(() => gone.abort());
    void drainListeners(plan, live.admin, log, AbortSignal.any([gone.signal, closing]));
  }

  /** What a drain-wait mode looks at, over `instances` (every running epoch's reporters by default). */
  waitContext(instances = () => this.#deps.envoys.reporters()): ModeContext {
    const { options: o, envoys, tracker, log } = this.#deps;
    const bootstraps = envoys.all().map((l) => l.bootstrap);
    const statsCounted = [...new Set(bootstraps.flatMap((b) => b.unseenListeners))];
    const prefixes = new Set(bootstraps.flatMap((b) => b.inboundStatPrefixes));
    return {
      admin: () => {
        const serving = envoys.serving();
        return serving && !serving.adminHandedOver ? serving.admin : undefined;
      },
      tracker,
      instances,
      // Listeners lastcall cannot see, or no known prefix: count every connection manager.
      statPrefixes: o.drainScope === "all" || statsCounted.length > 0 || prefixes.size === 0
        ? undefined
        : prefixes,
      statsCounted,
      log,
      terminationDrainMs: o.terminationDrainMs,
      heartbeatMs: o.heartbeatMs,
    };
  }

  /**
   * When the filter is in every listener, a pull: each epoch's filter reads its gauge (one read,
   * however many stats Envoy has). Otherwise, for listeners only Envoy's stats count,
   * `downstream_rq_active` is read from the admin as well (a walk of Envoy's stats); with a hot
   * restart in progress (a child's stats import its parent's) only the filters can be asked.
   */
  async measure(
    signal: AbortSignal,
    instances = this.#deps.envoys.reporters(),
  ): Promise<number | undefined> {
    const all = this.running();
    if (all.length === 0) return 0;
    const context = this.waitContext();
    // Only an epoch with a filter has reporters.
    const pullable = instances.length > 0 && all.every((l) => l.reporters.length > 0);
    // Envoy's stats can be read from one epoch only (a child's stats import its parent's).
    const only = all.length === 1 && !all[0].adminHandedOver ? all[0] : undefined;
    const admin = only?.admin;
    if (pullable && (context.statsCounted.length === 0 || !admin)) {
      return await this.#deps.tracker.pull(instances, signal);
    }
    if (!only || !admin) return undefined;
    const stats = parseStatsJson(
      await admin.stats(`^wasmcustom\\.${GAUGE_NAMES}$|downstream_rq_active$`, signal),
    );
    if (!pullable) return activeRequests(stats, context.statPrefixes);
    const gauge = stats.filter((s) => isInflightGauge(s.name)).reduce((sum, s) => sum + s.value, 0);
    const filtered = new Set(only.bootstrap.filteredStatPrefixes); // the gauge counts these already
    return gauge + activeRequests(stats) - activeRequests(stats, filtered);
  }

  reported(reporters = this.#deps.envoys.reporters()): number {
    return this.#deps.tracker.inflight(reporters);
  }

  undelivered(prefixes?: ReadonlySet<string>): Promise<Undelivered | undefined> {
    return undeliveredBy(this.#deps.envoys.all(), prefixes);
  }

  /** By its admin's `POST /quitquitquit` unless `byAdmin` is false or a hot-restart child took the admin over. */
  async stop(
    which: readonly Epoch[],
    budgetMs: number,
    options: { byAdmin?: boolean } = {},
  ): Promise<void> {
    for (const l of which) l.stopAsked = true;
    const byAdmin = options.byAdmin !== false;
    await Promise.all(
      which.map((l) =>
        stopEnvoy(l.process, budgetMs, {
          admin: byAdmin && !l.adminHandedOver ? l.admin : undefined,
          log: this.#deps.log,
        })
      ),
    );
  }

  /** Stops taking new inbound requests on every live epoch, once (`inbound_closed`). */
  closeInbound(why: string): Promise<void> {
    return this.#inbound.close(this.#deps.envoys.all(), why);
  }

  /** Whether a live epoch carries calls out: the apps may need it while they stop. */
  carriesCallsOut(): boolean {
    return this.#deps.envoys.all().some((l) => l.process.running && countsOutbound(l));
  }

  /** Requests in flight on inbound listeners now (see inbound.ts). */
  inboundInflight(signal: AbortSignal): Promise<number | undefined> {
    return inboundInflight(this.#deps.envoys.all(), (s) => this.measure(s), signal);
  }
}
