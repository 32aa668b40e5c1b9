// The old epochs of a reload (a hot restart's parent, a cold reload's Envoy) finish what they
// serve, or reach `--parent-shutdown`; a cold reload's is then stopped (docs/architecture.md).
import type { Epoch } from "../supervise/envoys.ts";
import type { EventLog } from "../lib/log.ts";
import type { RunOptions } from "../options.ts";
import type { DrainMetrics } from "./drain-metrics.ts";
import { drainBegins, undeliveredBy, UnreadResets } from "./delivery.ts";
import type { Undelivered } from "../envoy/sockets.ts";
import { DELIVERY_POLL_MS, deliveryReading } from "./delivery-reading.ts";
import { DrainEnded, freshReading, type Settled, waitDrained } from "./wait.ts";
import { countNow, drainListeners, type LiveEpochs } from "./epochs.ts";
import type { DrainPlan } from "./plan.ts";
import { delay } from "../lib/async.ts";
import { setIdlePressure, stillListening } from "../envoy/idle-close.ts";

/**
 * Has the old Envoys close their idle client connections (envoy/idle-close.ts) once they accept
 * no more: Envoy's drain leaves them open, and a pooled one may bring a request long after the
 * rest finished. Returns at once what the `epoch_draining` line says (`closing`, or why they are
 * left to their clients); what fails later is logged as `idle_close_failed`.
 */
function closeIdleConnections(
  old: readonly Epoch[],
  log: EventLog,
  signal: AbortSignal,
): string {
  const why = new Set<string>();
  for (const l of old) {
    const idle = l.bootstrap.idleClose;
    if (!idle) why.add("no pressure file");
    else if ("unavailable" in idle) why.add(idle.unavailable);
    else {void closeOnceNotListening(l, idle.file, signal).catch((error) => {
        const said = { epoch: l.info.epoch, error: (error as Error).message };
        if (!signal.aborted) log("idle_close_failed", said);
      });}
  }
  return why.size === 0 ? "closing" : `left to their clients: ${[...why].join("; ")}`;
}

/**
 * `l` as seen through its listeners that are not OUTBOUND (static ones: their ports are written
 * in the config): the app's own pools through Envoy (databases) are not waited for.
 */
function withoutOutboundPorts(l: Epoch): Epoch {
  const resources = l.bootstrap.config.static_resources as { listeners?: unknown[] } | undefined;
  const outbound = new Set<number>();
  for (const listener of resources?.listeners ?? []) {
    const { traffic_direction: direction, address } = listener as {
      traffic_direction?: string;
      address?: { socket_address?: { port_value?: number } };
    };
    const port = address?.socket_address?.port_value;
    if (direction === "OUTBOUND" && typeof port === "number" && port > 0) outbound.add(port);
  }
  return { ...l, listenPorts: new Set([...l.listenPorts].filter((port) => !outbound.has(port))) };
}

async function closeOnceNotListening(l: Epoch, file: string, signal: AbortSignal) {
  for (;;) {
    const listening = await stillListening(l.process.pid);
    if (listening === undefined) throw new Error("cannot tell from /proc whether it still accepts");
    if (!listening) break;
    await delay(DELIVERY_POLL_MS, signal);
  }
  await setIdlePressure(file, 1);
}

/** What finishing old epochs reads. */
export interface OldEpochDeps {
  options: RunOptions;
  log: EventLog;
  epochs: LiveEpochs;
  /** How drains end, for `/metrics` (kind `reload`). */
  drainMetrics?: DrainMetrics;
  /** Tells the filters of the epochs being drained at once (answers their held heartbeats). */
  tellFilters(): void;
}

/** How an old Envoy's drain is run. */
export interface OldEpochRequest {
  /**
   * `hot`: a hot restart's parent, whose listeners the child already drained and whose admin is
   * gone; `cold`: the Envoy a cold reload replaces, still serving with its admin.
   */
  kind: "hot" | "cold";
  /** Aborts the wait (a terminate takes over; lastcall closes). */
  signal: AbortSignal;
}

/**
 * Drains `old` until nothing is in flight in it and every response byte is delivered (or
 * `--parent-shutdown` passed); a cold reload's old Envoy is then stopped. `epoch_drained` and the
 * `epoch_exit` line say what was left at the end.
 *
 * @returns Why the drain ended: `inflight_zero`, `requests_zero`, `connections_closed`,
 * `deadline` (the limit), or `aborted` (a terminate took over: nothing was stopped)
 * @example
 * ```ts
 * await finishOldEpochs([parent], deps, { kind: "hot", signal });
 * ```
 */
async function finishOldEpochs(
  old: Epoch[],
  deps: OldEpochDeps & { markDraining(ids: readonly string[]): void },
  request: OldEpochRequest,
): Promise<string> {
  const o = deps.options;
  const reporters = old.flatMap((l) => l.reporters);
  const measure = (s: AbortSignal) => deps.epochs.measure(s, reporters);
  const undelivered = (of: readonly Epoch[]) => undeliveredBy(of);
  const startedAt = Date.now();
  const plan: DrainPlan = {
    mode: reporters.length > 0 ? "inflight" : "requests",
    scope: o.drainScope,
    failHealthcheck: false,
    drainDelayMs: 0,
    minDrainMs: 0,
    startedAt,
    deadline: startedAt + o.parentShutdownMs,
    epochs: old.map((l) => l.info.epoch),
  };
  deps.markDraining(reporters);
  const metered = deps.drainMetrics?.started("reload", () => plan.deadline);
  /** The wait's last reading (see drainer.ts). */
  let settled: Settled | undefined;
  const ended = new AbortController();
  const timer = setTimeout(() => ended.abort(new DrainEnded("deadline")), o.parentShutdownMs);
  const onAbort = () => ended.abort(request.signal.reason);
  request.signal.addEventListener("abort", onAbort, { once: true });
  // One that exits while drained ends the drain. Unasked (a kill -9), it took what it held with
  // it, and the drain says so; stopped by a termination, the termination says what was cut.
  let lost: number | undefined;
  let stoppedByOthers = false;
  for (const l of old) {
    void l.process.exited.then(() => {
      if (ended.signal.aborted) return;
      if (l.stopAsked) stoppedByOthers = true;
      else lost = (lost ?? 0) + deps.epochs.reported(l.reporters);
      ended.abort(new DrainEnded("envoy_exited"));
    });
  }
  const epochs = old.map((l) => l.info.epoch);
  const idleWatch = new AbortController(); // ends with the drain
  const idle = closeIdleConnections(old, deps.log, idleWatch.signal);
  deps.log("epoch_draining", {
    epochs,
    kind: request.kind,
    limit_ms: o.parentShutdownMs,
    counted_by: reporters.length > 0 ? "filter" : request.kind === "cold" ? "stats" : "connections",
    idle_connections: idle,
  });
  // Requests sent on idle connections while Envoy held them for its delayed close, never read.
  const resets = new UnreadResets();
  let reason: string;
  try {
    if (request.kind === "cold") {
      for (const l of old) {
        // It takes no new connection once Envoy's --drain-time has passed: not ready (serve.ts).
        l.listenersDraining = true;
        if (l.admin && !l.adminHandedOver) {
          void drainListeners(plan, l.admin, deps.log, ended.signal);
        }
      }
    }
    // A hot parent is done once it holds no client connection (OUTBOUND listeners aside): an
    // idle one may carry a request at any time (Envoy's drain answers it), and Envoy ends the
    // parent as the next child starts. Its idle connections are closed above, unless the config
    // prevents it.
    const byConnections = request.kind === "hot";
    if (reporters.length > 0 || request.kind === "cold") {
      const context = deps.epochs.waitContext(() => reporters);
      reason = await waitDrained(plan, {
        ...context,
        ...(request.kind === "hot" ? { statsCounted: [] } : {}),
        measure,
        undelivered: () => undelivered(old),
        settled: (last) => void (settled = last),
      }, ended.signal);
    } else {
      reason = "connections_closed";
    }
    if (byConnections && !ended.signal.aborted) {
      const clients = old.map(withoutOutboundPorts);
      for (;;) {
        const left = await undelivered(clients);
        resets.look(left);
        if (!left?.connections) break;
        await delay(DELIVERY_POLL_MS, ended.signal);
      }
    }
  } catch (error) {
    const cause = ended.signal.aborted ? ended.signal.reason : error;
    if (!(cause instanceof DrainEnded)) {
      metered?.ended();
      if (request.signal.aborted) return "aborted";
      throw error;
    }
    reason = cause.reason;
  } finally {
    clearTimeout(timer);
    idleWatch.abort();
    request.signal.removeEventListener("abort", onAbort);
  }
  if (request.signal.aborted || stoppedByOthers) {
    metered?.ended();
    return "aborted";
  }
  // A zero read before the limit is not how it ended.
  const last = DrainEnded.reasons.includes(reason) ? undefined : settled;
  const zeroAt = last?.inflight === 0 ? last.at : undefined;
  // The wait's last reading when it is fresh, else a count read now (a report is a hint only).
  const [counted, left] = await Promise.all([
    freshReading(last)?.inflight ?? countNow(deps.epochs, 500, reporters),
    undelivered(old),
  ]);
  const inflight = lost ?? counted;
  const { bytesUnsent, unchecked } = readingOf(left, old);
  const cut = {
    inflight_at_stop: inflight,
    ...(bytesUnsent !== undefined ? { bytes_unsent_at_stop: bytesUnsent } : {}),
    ...(unchecked ? { delivery_unchecked: unchecked } : {}),
    ...(resets.count > 0 ? { unread_at_close: resets.count } : {}),
  };
  for (const l of old) l.drained = { drain_reason: reason, ...cut };
  const drainMs = Date.now() - startedAt;
  deps.log("epoch_drained", { epochs, reason, ms: drainMs, ...cut });
  const outcome = {
    reason,
    drainMs,
    inflightAtStop: inflight,
    ...(bytesUnsent !== undefined ? { bytesUnsent } : {}),
  };
  if (request.kind === "hot") {
    metered?.ended(outcome); // lastcall stops no hot parent: no time to a stop
    return reason; // its child ends it (see above)
  }
  metered?.ended({
    ...outcome,
    ...(zeroAt !== undefined ? { lastZeroToStopMs: Date.now() - zeroAt } : {}),
  });
  await deps.epochs.stop(old, 3000);
  return reason;
}

/**
 * The old epochs of reloads being finished: each is drained once, and a hot restart waits until
 * they all finished (Envoy ends a grandparent as soon as the next child starts).
 *
 * @example
 * ```ts
 * const old = new OldEpochs({ options, log, epochs, drainMetrics, tellFilters });
 * await old.finish([parent], "hot", signal); // "inflight_zero"
 * ```
 */
export class OldEpochs {
  readonly #deps: OldEpochDeps;
  /** Reporters of the old epochs being drained. */
  readonly #draining = new Set<string>();
  readonly #finishing = new WeakSet<Epoch>();
  readonly #unfinished = new Set<Promise<void>>();

  constructor(deps: OldEpochDeps) {
    this.#deps = deps;
  }

  /** Whether the filter reporting as `instance` is in an old epoch being drained. */
  isDraining(instance: string): boolean {
    return this.#draining.has(instance);
  }

  /**
   * Drains the old epochs of a reload and stops them once they have finished (see above): a hot
   * restart's parent once its child serves, or, before a cold reload, the Envoy it replaces.
   */
  finish(all: Epoch[], kind: "hot" | "cold", signal: AbortSignal): Promise<string> {
    const old = all.filter((l) => !this.#finishing.has(l)); // a second reload finds the first's parent already finishing
    if (old.length === 0) return Promise.resolve("already_finishing");
    for (const l of old) this.#finishing.add(l);
    void drainBegins(old);
    const markDraining = (ids: readonly string[]) => {
      for (const id of ids) this.#draining.add(id);
      this.#deps.tellFilters();
    };
    const done = finishOldEpochs(old, { ...this.#deps, markDraining }, { kind, signal });
    const settled = done.catch(() => {}).then(() => void this.#unfinished.delete(settled));
    this.#unfinished.add(settled);
    return done;
  }

  /** Resolves once every old epoch being finished has finished (or reached its limit). */
  async finished(): Promise<void> {
    await Promise.all([...this.#unfinished]);
  }
}

/**
 * What `old` had left to deliver as `epoch_drained` says it: an epoch that exited before the
 * reading (unasked, or stopped by a termination that says its own cut) is named as unchecked.
 */
function readingOf(
  left: Undelivered | undefined,
  old: readonly Epoch[],
): { bytesUnsent?: number; unchecked?: string[] } {
  const gone = old.filter((l) => !l.process.running).map((l) => l.info.epoch);
  if (gone.length === 0) return deliveryReading(left);
  const rest = left ? deliveryReading(left).unchecked ?? [] : [];
  return { unchecked: [...rest, `epoch ${gone.join(", ")}: exited before its buffers were read`] };
}
