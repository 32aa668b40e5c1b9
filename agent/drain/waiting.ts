// What a drain waits for, as operators see it: the `drain` of `/v1/state` and the `drain_waiting`
// event every few seconds while the drain waits. Holders come from the filter's VMs (holders.ts);
// listener names from each Envoy's admin, read once per Envoy during a drain.
import { delay } from "../lib/async.ts";
import type { EventLog } from "../lib/log.ts";
import { listenerAt, type ListenerNames, parseListenerNames } from "../envoy/listeners.ts";
import type { AppWatch } from "../supervise/app-watch.ts";
import type { Envoys, Epoch } from "../supervise/envoys.ts";
import type { HolderBook, HolderView } from "./holders.ts";
import type { InflightTracker } from "./in-flight.ts";
import type { DrainPlan } from "./plan.ts";

/** When the first `drain_waiting` is said, after the drain began. */
export const DRAIN_WAITING_FIRST_MS = 2000;
/** How often `drain_waiting` is said after that, while the drain waits. */
export const DRAIN_WAITING_EVERY_MS = 5000;
/** Holders named in one `drain_waiting` line (all of them are in `/v1/state`). */
export const DRAIN_WAITING_HOLDERS = 5;

/** The `drain` of `/v1/state`, while a drain is under way. */
export interface DrainView {
  source: string;
  mode: string;
  started_at: string;
  deadline_at: string;
  deadline_in_ms: number;
  /** Requests in flight, as the filters last said. */
  inflight: number;
  /** What the filters named, oldest first. */
  holders: HolderView[];
  /** Counted by the filters, not named (more than each VM names, or not tracked). */
  unnamed: number;
  by_listener: Record<string, number>;
  /** Apps `lastcall exec` said still run. */
  apps: Array<{ id: string; pid?: number }>;
  /** Response bytes Envoy still has to deliver to slow readers, while the delivery wait looks. */
  unsent_bytes?: number;
  /** A drain in place whose wait has ended (Envoy serves on): why, and when, from its start. */
  wait_ended?: { reason: string; after_ms: number };
}

/** How long what the delivery wait saw is shown. */
const UNSENT_SHOWN_MS = 2000;

/** What {@linkcode DrainWatch} reads. */
export interface DrainWatchDeps {
  envoys: Envoys;
  tracker: InflightTracker;
  holders: HolderBook;
  app: AppWatch;
  log: EventLog;
}

/**
 * Tells what a drain waits for.
 *
 * @example
 * ```ts
 * const watch = new DrainWatch({ envoys, tracker, holders, app, log });
 * void watch.sayWhileWaiting(plan, ended); // drain_waiting every 5 s
 * watch.view(plan); // { inflight: 3, holders: [...], ... }
 * ```
 */
export class DrainWatch {
  readonly #deps: DrainWatchDeps;
  readonly #names = new WeakMap<Epoch, ListenerNames>();
  #unsent?: { bytes: number; at: number };

  constructor(deps: DrainWatchDeps) {
    this.#deps = deps;
  }

  /** What the delivery wait saw (shown for a while in {@linkcode view}); returns `left`. */
  sawUndelivered<T extends { bytes: number } | undefined>(left: T): T {
    if (left) this.#unsent = { bytes: left.bytes, at: Date.now() };
    return left;
  }

  /** The drain's state now. */
  view(plan: DrainPlan): DrainView {
    const { envoys, tracker, holders, app } = this.#deps;
    const reporters = envoys.reporters();
    const listenerOf = (instance: string, address: string) => {
      const live = envoys.all().find((l) => l.reporters.includes(instance));
      const names = live && this.#names.get(live);
      return names && listenerAt(names, address);
    };
    const now = holders.now(reporters, listenerOf, (instance) => tracker.inflight([instance]));
    return {
      source: plan.source ?? "unknown",
      mode: plan.mode,
      started_at: new Date(plan.startedAt).toISOString(),
      deadline_at: new Date(plan.deadline).toISOString(),
      deadline_in_ms: Math.max(0, plan.deadline - Date.now()),
      inflight: tracker.inflight(reporters),
      holders: now.holders,
      unnamed: now.unnamed,
      by_listener: now.byListener,
      apps: app.apps(),
      ...(this.#unsent && Date.now() - this.#unsent.at <= UNSENT_SHOWN_MS
        ? { unsent_bytes: this.#unsent.bytes }
        : {}),
    };
  }

  /** Says `drain_waiting` every few seconds until `ended` aborts. */
  async sayWhileWaiting(plan: DrainPlan, ended: AbortSignal): Promise<void> {
    try {
      await this.#learnListenerNames(ended); // at once: /v1/state names listeners from now on
      await delay(Math.max(0, plan.startedAt + DRAIN_WAITING_FIRST_MS - Date.now()), ended);
      for (;;) {
        await this.#learnListenerNames(ended);
        const { holders, inflight, unnamed, by_listener, apps, deadline_in_ms, unsent_bytes } = this
          .view(plan);
        this.#deps.log("drain_waiting", {
          inflight,
          holders: holders.slice(0, DRAIN_WAITING_HOLDERS),
          by_listener,
          unnamed,
          apps,
          deadline_in_ms,
          ...(unsent_bytes !== undefined ? { unsent_bytes } : {}),
        });
        await delay(DRAIN_WAITING_EVERY_MS, ended);
      }
    } catch (error) {
      // The wait ended; anything else is lastcall's own bug: said, and the drain goes on.
      if (!ended.aborted) this.#deps.log("drain_waiting_failed", { error: String(error) });
    }
  }

  /** Reads the listener names of each Envoy not asked yet (an Envoy that does not answer is asked again next time). */
  async #learnListenerNames(signal: AbortSignal): Promise<void> {
    await Promise.all(
      this.#deps.envoys.all().map(async (live) => {
        if (this.#names.has(live) || !live.admin || !live.process.running) return;
        const text = await live.admin.request(
          "GET",
          "/listeners?format=json",
          AbortSignal.any([signal, AbortSignal.timeout(500)]),
        ).catch(() => undefined);
        if (text !== undefined) this.#names.set(live, parseListenerNames(text));
      }),
    );
  }
}
