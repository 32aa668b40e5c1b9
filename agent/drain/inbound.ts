// The inbound side alone, for the app's preStop and for the end of the app: what is in flight on
// inbound listeners, and stopping them (Envoy's `drain_listeners?inboundonly` without `graceful`
// closes their sockets at once; accepted connections and outbound listeners go on).
import { TCP_GAUGE } from "../envoy/bootstrap.ts";
import { parseListenerNames } from "../envoy/listeners.ts";
import { setIdlePressure } from "../envoy/idle-close.ts";
import { readTcpTable, socketInodes, TCP_STATE, type TcpSocket } from "../envoy/sockets.ts";
import type { AdminClient } from "../envoy/admin.ts";
import { delay } from "../lib/async.ts";
import { activeRequests, parseStatsJson } from "../envoy/stats.ts";
import type { EventLog } from "../lib/log.ts";
import type { Epoch } from "../supervise/envoys.ts";
import { retryAdmin } from "./shutdown.ts";

/** The admin call that closes every INBOUND listener's socket now, without a drain time. */
export const STOP_INBOUND = "/drain_listeners?inboundonly";

/** How long lastcall looks for the inbound sockets to close after Envoy said it closes them. */
const CLOSE_SEEN_MS = 1000;

/**
 * Whether an Envoy carries calls out (OUTBOUND listeners, or LDS ones lastcall cannot tell), so
 * its filter gauge also counts outbound requests.
 */
export function countsOutbound(live: Epoch): boolean {
  return live.bootstrap.outboundListeners.length > 0 || live.bootstrap.unseenListeners.length > 0;
}

/**
 * Requests in flight on inbound listeners now. Where the filter's gauge counts inbound only (no
 * OUTBOUND listener has the filter), it is `measure` (the filter's pulled count); otherwise
 * Envoy's own `downstream_rq_active` of the inbound connection managers, plus the TCP variant's
 * gauge (inbound only). Undefined when it cannot be told (a hot restart under way).
 *
 * @example
 * ```ts
 * const n = await inboundInflight(envoys.all(), (s) => epochs.measure(s), signal); // 0
 * ```
 */
export async function inboundInflight(
  all: readonly Epoch[],
  measure: (signal: AbortSignal) => Promise<number | undefined>,
  signal: AbortSignal,
): Promise<number | undefined> {
  const running = all.filter((l) => l.process.running);
  if (running.length === 0) return 0;
  if (!running.some(countsOutbound)) return await measure(signal);
  const only = running.length === 1 && !running[0].adminHandedOver ? running[0] : undefined;
  if (!only?.admin) return undefined;
  const b = only.bootstrap;
  const stats = parseStatsJson(
    await only.admin.stats(`^wasmcustom\\.${TCP_GAUGE}(_odd)?$|downstream_rq_active$`, signal),
  );
  const tcpGauges = stats.filter((s) => s.name.startsWith(`wasmcustom.${TCP_GAUGE}`));
  const tcp = tcpGauges.reduce((sum, s) => sum + s.value, 0);
  // LDS listeners have prefixes lastcall does not know: every connection manager is counted.
  const prefixes = b.unseenListeners.length > 0 ? undefined : new Set(b.inboundStatPrefixes);
  return tcp + activeRequests(stats, prefixes);
}

/**
 * Stops the inbound listeners of every live Envoy once (and of one that becomes ready later),
 * logging `inbound_closed`.
 *
 * @example
 * ```ts
 * const inbound = new InboundCloser(log, closing);
 * await inbound.close(envoys.all(), "app-stop: quiet");
 * ```
 */
export class InboundCloser {
  readonly #log: EventLog;
  readonly #closing: AbortSignal;
  readonly #done = new WeakSet<Epoch>();
  #closed?: Promise<void>;

  constructor(log: EventLog, closing: AbortSignal) {
    this.#log = log;
    this.#closing = closing;
  }

  /** Whether inbound was closed (or is being closed). */
  get closed(): boolean {
    return this.#closed !== undefined;
  }

  /** Closes inbound on every live Envoy; the first call's `why` is logged, later ones wait. */
  close(all: readonly Epoch[], why: string): Promise<void> {
    this.#closed ??= Promise.all(all.map((l) => this.closeOn(l))).then((epochs) => {
      this.#log("inbound_closed", { why, epochs: epochs.filter((e) => e !== undefined) });
    });
    return this.#closed;
  }

  /** Closes inbound on one Envoy (retried until it answers or exits); resolves with its epoch. */
  async closeOn(live: Epoch): Promise<number | undefined> {
    const admin = live.admin;
    const able = live.ready && live.process.running && !live.adminHandedOver;
    if (this.#done.has(live) || !able || !admin) return undefined;
    this.#done.add(live);
    const gone = new AbortController();
    live.process.exited.then(() => gone.abort());
    const signal = AbortSignal.any([gone.signal, this.#closing]);
    const ports = await inboundPorts(live, admin, signal);
    const stop = (s: AbortSignal) => admin.request("POST", STOP_INBOUND, s);
    if (!await retryAdmin(STOP_INBOUND, stop, signal, this.#log)) return undefined;
    // Envoy 1.40 answers once its workers closed their sockets (measured), which no doc promises:
    // seen closed in /proc, no new connection can come.
    const seen = AbortSignal.any([signal, AbortSignal.timeout(CLOSE_SEEN_MS)]);
    await closedIn(live, ports, seen);
    // Kept-alive connections would still bring new requests. With no outbound listener every
    // idle connection is an inbound one: closed too (an app's pooled outbound ones are left).
    const idle = live.bootstrap.idleClose;
    if (!countsOutbound(live) && idle && "file" in idle) {
      void setIdlePressure(idle.file, 1).catch(() => {});
    }
    return live.info.epoch;
  }
}

/** The ports of an Envoy's inbound listeners, by their names (LDS ones are not known). */
async function inboundPorts(live: Epoch, admin: AdminClient, signal: AbortSignal) {
  const inbound = new Set(live.bootstrap.inboundListeners);
  const text = await admin.request("GET", "/listeners?format=json", signal).catch(() => "");
  const ports: number[] = [];
  for (const [port, name] of parseListenerNames(text)) {
    if (name.split("|").some((n) => inbound.has(n))) ports.push(port);
  }
  return ports;
}

/** Resolves once `live` listens on none of `ports` (as /proc tells), or when `signal` aborts. */
async function closedIn(live: Epoch, ports: readonly number[], signal: AbortSignal) {
  if (ports.length === 0) return;
  // Only the tables its listeners were seen in, when known: each read walks the kernel's table.
  const tables = live.listenTables.size > 0 ? [...live.listenTables] : undefined;
  while (!signal.aborted) {
    const [table, inodes] = await Promise.all([
      readTcpTable("/proc", tables),
      socketInodes(live.process.pid),
    ]);
    if (!table || !inodes) return; // not Linux: Envoy's answer is all there is
    const listening = (s: TcpSocket) => s.state === TCP_STATE.listen && ports.includes(s.localPort);
    if (!table.some((s) => listening(s) && inodes.has(s.inode))) return;
    await delay(5, signal).catch(() => {});
  }
}
