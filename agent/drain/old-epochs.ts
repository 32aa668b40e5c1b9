// The old Envoys of a reload (SIGHUP, a watched file): a hot restart's parent once its child
// serves, or the Envoy a cold reload replaces. Each may finish what it serves: until its filter
// counts a confirmed zero, its connections have delivered every response byte and (a hot parent)
// it holds no client connection (its idle ones are closed: envoy/idle-close.ts), or until
// `--parent-shutdown` (10 minutes by default), and what is left at that limit is said. The Envoy
// of a cold reload is then stopped by lastcall. A hot-restart parent is ended by its child (only
// the child may: it messages its parent when it shuts down, and Envoy aborts when that message
// finds no parent): at the child's shutdown, the next reload, or Envoy's timer a second after the
// limit. Finished, it serves nothing meanwhile.
import type { LiveEnvoy } from "../supervise/envoys.ts";
import type { Undelivered } from "../envoy/sockets.ts";
import type { EventLog } from "../lib/log.ts";
import type { RunOptions } from "../options.ts";
import type { InflightTracker } from "./in-flight.ts";
import type { ModeContext } from "./modes/context.ts";
import type { DrainMetrics } from "./drain-metrics.ts";
import { DELIVERY_POLL_MS, deliveryReading, DrainEnded, drainListeners, type DrainPlan, countNow, freshReading, type Settled, waitDrained } from "./shutdown.ts";
import { stopEnvoy } from "../envoy/process.ts";
import { delay } from "../lib/async.ts";
import { setIdlePressure, stillListening } from "../envoy/idle-close.ts";

/**
 * Has the old Envoys close their idle client connections (envoy/idle-close.ts) once they accept
 * no more: Envoy's drain leaves them open, and a pooled one may bring a request long after the
 * rest finished. Returns at once what the `epoch_draining` line says (`closing`, or why they are
 * left to their clients); what fails later is logged as `idle_close_failed`.
 */
function closeIdleConnections(
  old: readonly LiveEnvoy[],
  log: EventLog,
  signal: AbortSignal,
): string {
  const why = new Set<string>();
  for (const l of old) {
    const idle = l.bootstrap.idleClose;
    if (!idle) why.add("no pressure file");
    else if ("unavailable" in idle) why.add(idle.unavailable);
    else void closeOnceNotListening(l, idle.file, signal).catch((error) => {
      const said = { epoch: l.info.epoch, error: (error as Error).message };
      if (!signal.aborted) log("idle_close_failed", said);
    });
  }
  return why.size === 0 ? "closing" : `left to their clients: ${[...why].join("; ")}`;
}

/**
 * `l` as seen through its listeners that are not OUTBOUND (static ones: their ports are written
 * in the config): the app's own pools through Envoy (databases) are not waited for.
 */
function withoutOutboundPorts(l: LiveEnvoy): LiveEnvoy {
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

async function closeOnceNotListening(l: LiveEnvoy, file: string, signal: AbortSignal) {
  for (;;) {
    const listening = await stillListening(l.process.pid);
    if (listening === undefined) throw new Error("cannot tell from /proc whether it still accepts");
    if (!listening) break;
    await delay(DELIVERY_POLL_MS, signal);
  }
  await setIdlePressure(file, 1);
}

/** What finishing old Envoys needs from the drainer. */
export interface OldEpochDeps {
  options: RunOptions;
  log: EventLog;
  tracker: InflightTracker;
  /** Envoys stopped on purpose: their exit is no crash. */
  retiring: Set<string>;
  /** Tells the filters reporting under `ids` that they drain (they then push their zero). */
  markDraining(ids: readonly string[]): void;
  /** The mode context over the given reporters. */
  modeContext(instances: () => string[]): ModeContext;
  /** Requests in flight in the old Envoys now (a pull through their filters, or their admin). */
  measure(signal: AbortSignal): Promise<number | undefined>;
  undelivered(live: readonly LiveEnvoy[]): Promise<Undelivered | undefined>;
  /** How drains end, for `/metrics` (kind `reload`). */
  drains?: DrainMetrics;
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
export async function finishOldEpochs(old: LiveEnvoy[], deps: OldEpochDeps, request: OldEpochRequest): Promise<string> {
  const o = deps.options;
  const reporters = old.flatMap((l) => l.reporters);
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
  const metered = deps.drains?.started("reload", () => plan.deadline);
  /** The wait's last reading (see shutdown.ts). */
  let settled: Settled | undefined;
  const ended = new AbortController();
  const timer = setTimeout(() => ended.abort(new DrainEnded("deadline")), o.parentShutdownMs);
  const onAbort = () => ended.abort(request.signal.reason);
  request.signal.addEventListener("abort", onAbort, { once: true });
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
  let reason: string;
  try {
    if (request.kind === "cold") {
      for (const l of old) if (l.admin && !l.adminHandedOver) void drainListeners(plan, l.admin, deps.log, ended.signal);
    }
    // A hot parent is done once it holds no client connection (OUTBOUND listeners aside): an
    // idle one may carry a request at any time (Envoy's drain answers it), and Envoy ends the
    // parent as the next child starts. Its idle connections are closed above, unless the config
    // prevents it.
    const byConnections = request.kind === "hot";
    if (reporters.length > 0 || request.kind === "cold") {
      const context = deps.modeContext(() => reporters);
      reason = await waitDrained(plan, {
        ...context,
        ...(request.kind === "hot" ? { statsCounted: [] } : {}),
        measure: deps.measure,
        undelivered: () => deps.undelivered(old),
        settled: (last) => void (settled = last),
      }, ended.signal);
    } else {
      reason = "connections_closed";
    }
    if (byConnections && !ended.signal.aborted) {
      const clients = old.map(withoutOutboundPorts);
      while ((await deps.undelivered(clients))?.connections ?? 0) {
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
  if (request.signal.aborted) {
    metered?.ended();
    return "aborted";
  }
  // A zero read before the limit is not how it ended.
  const last = DrainEnded.reasons.includes(reason) ? undefined : settled;
  const zeroAt = last?.inflight === 0 ? last.at : undefined;
  // The wait's last reading when it is fresh, else a count read now (a report is a hint only).
  const [inflight, left] = await Promise.all([
    freshReading(last)?.inflight ?? countNow(deps.measure, () => deps.tracker.inflight(reporters), 500),
    deps.undelivered(old),
  ]);
  const { bytesUnsent, unchecked } = deliveryReading(left);
  const cut = {
    inflight_at_stop: inflight,
    ...(bytesUnsent !== undefined ? { bytes_unsent_at_stop: bytesUnsent } : {}),
    ...(unchecked ? { delivery_unchecked: unchecked } : {}),
  };
  for (const l of old) l.drained = { drain_reason: reason, ...cut };
  const drainMs = Date.now() - startedAt;
  deps.log("epoch_drained", { epochs, reason, ms: drainMs, ...cut });
  const outcome = { reason, drainMs, inflightAtStop: inflight, ...(bytesUnsent !== undefined ? { bytesUnsent } : {}) };
  if (request.kind === "hot") {
    metered?.ended(outcome); // lastcall stops no hot parent: no time to a stop
    return reason; // its child ends it (see above)
  }
  for (const l of old) deps.retiring.add(l.info.instance);
  metered?.ended({ ...outcome, ...(zeroAt !== undefined ? { lastZeroToStopMs: Date.now() - zeroAt } : {}) });
  await Promise.all(old.map((l) => stopEnvoy(l.process, 3000, { admin: l.adminHandedOver ? undefined : l.admin, log: deps.log })));
  return reason;
}
