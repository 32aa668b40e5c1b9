// What the live Envoys still have to deliver: the kernel's TCP send queues of the connections
// they accepted (sockets.ts) and what each Envoy holds itself, from its stats: HTTP/2 bytes
// waiting for a client's window, write buffers (unix sockets). What cannot be seen is said.
import type { Epoch } from "../supervise/envoys.ts";
import { BUFFER_STATS, type EnvoyBuffers, envoyBuffers, parseStatsJson } from "../envoy/stats.ts";
import {
  readTcpTable,
  socketInodes,
  type Undelivered,
  undelivered,
  unixConnections,
} from "../envoy/sockets.ts";
import { watchWrites, wroteLately } from "./parent-writes.ts";

/** Longest wait for one Envoy's stats in a look at what is undelivered. */
const BUFFERS_READ_MS = 500;
/** Each Envoy's count of delayed-close timeouts when last read before its drain began. */
const delayedCloseBase = new WeakMap<Epoch, number>();
/** The Envoys whose drain began ({@linkcode drainBegins}). */
const drainBegun = new WeakSet<Epoch>();

/** What open HTTP/2 and HTTP/3 connections keep out of sight. */
function unseenOn(held: EnvoyBuffers): string[] {
  const h2 = "what a client took but has not read, up to its window, is not seen";
  const h3 = "QUIC's send buffers are in no stat";
  return [
    ...(held.http2Connections ? [`${held.http2Connections} HTTP/2 connections open (${h2})`] : []),
    ...(held.http3Connections ? [`${held.http3Connections} HTTP/3 connections open (${h3})`] : []),
  ];
}

/** What one Envoy holds, from its stats: bytes, drained HTTP/2 connections, what is unseen. */
interface Held {
  bytes: number;
  http2Open?: number;
  /** Open connections whose Envoy's buffers cannot be read, by inode: seen carrying bytes. */
  unseen?: Map<number, boolean>;
  unchecked?: string;
}

/**
 * Connections Envoy closed since the drain began because their delayed close ran out: the peer
 * had not closed, and may still have been reading (an HTTP/2 client's next WINDOW_UPDATE meets
 * the closed socket: a reset, and a client may drop what it took but had not read).
 */
function closedOnPeer(live: Epoch, timeouts: number, draining: boolean): string | undefined {
  if (!draining || !delayedCloseBase.has(live)) delayedCloseBase.set(live, timeouts);
  const closed = timeouts - delayedCloseBase.get(live)!;
  if (closed <= 0) return undefined;
  return `${closed} connections closed by Envoy's delayed close timeout while their client had ` +
    "not closed (what it had not read yet may be lost)";
}

/** Whether lastcall can read `live`'s own buffers: its admin is its own (not handed over). */
function readable(live: Epoch): boolean {
  return live.admin !== undefined && !live.adminHandedOver;
}

/** What `live` holds in its own buffers (its admin's stats), and what of it cannot be seen. */
async function heldBy(live: Epoch, prefixes?: ReadonlySet<string>): Promise<Held> {
  const epoch = `epoch ${live.info.epoch}`;
  const draining = drainBegun.has(live); // as the reading began
  try {
    const text = await live.admin!.stats(BUFFER_STATS, AbortSignal.timeout(BUFFERS_READ_MS));
    const held = envoyBuffers(parseStatsJson(text), prefixes);
    const closed = closedOnPeer(live, held.delayedCloseTimeouts, draining);
    const unseen = [...unseenOn(held), ...(closed ? [closed] : [])].join("; ");
    return {
      bytes: held.bytes,
      http2Open: held.http2Of,
      ...(unseen ? { unchecked: `${epoch}: ${unseen}` } : {}),
    };
  } catch (error) {
    const why = (error as Error).message;
    return { bytes: 0, unchecked: `${epoch}: its own buffers (its admin did not answer: ${why})` };
  }
}

/** `live`'s admin address when it is a unix socket: not a listener of its traffic. */
function adminPath(live: Epoch): string[] {
  return live.admin?.url.startsWith("unix:") ? [live.admin.url.slice("unix:".length)] : [];
}

/**
 * The connections `live` accepted on its unix-socket listeners (learning their paths); `inodes`,
 * its sockets when this look read them already.
 */
function unixOf(live: Epoch, inodes?: Set<number>): Promise<number[] | undefined> {
  return unixConnections(live.process.pid, live.listenPaths, adminPath(live), "/proc", inodes);
}

/**
 * A hot-restart parent's admin is gone: its own buffers cannot be read. With no accepted
 * connection left (TCP, as `tcp` read them, or unix) there is nothing they could hold. A unix
 * socket shows no queue: while the parent still writes, its unix connections may carry bytes.
 */
async function handedOver(
  live: Epoch,
  tcp: Undelivered,
  inodes: Set<number>,
): Promise<Held> {
  const unix = await unixOf(live, inodes);
  const open = tcp.connections + (unix?.length ?? 0);
  if (unix !== undefined && open === 0) return { bytes: 0 };
  const why = `${open} open connections; its admin went to its hot-restart child`;
  const unseen = new Map([...tcp.queued ?? []].map(([inode, bytes]) => [inode, bytes > 0]));
  const writing = unix?.length ? await wroteLately(live) !== false : false;
  for (const inode of unix ?? []) unseen.set(inode, writing);
  return { bytes: 0, unseen, unchecked: `epoch ${live.info.epoch}: its own buffers (${why})` };
}

/**
 * Learns what the given Envoys listen on while they do (Envoy closes a draining listener before
 * its last connections, and a hot-restart parent's listeners go before its admin does): their
 * ports and unix-socket paths; a hot-restart parent's writes are watched from then on.
 *
 * @example
 * ```ts
 * void learnListening([live]); // once it is ready
 * ```
 */
export async function learnListening(live: readonly Epoch[]): Promise<void> {
  for (const l of live) if (!readable(l)) watchWrites(l);
  await Promise.all([undeliveredBy(live).catch(() => undefined), ...live.map((l) => unixOf(l))]);
}

/**
 * Counts the connections Envoy closed holding bytes their client sent that it never read: a
 * request sent on an idle keep-alive connection while Envoy held it for its delayed close (it
 * reads nothing then, and resets the connection at the end). Unread at two looks in a row, then
 * gone: Envoy reads a request it serves within a few ms.
 *
 * @example
 * ```ts
 * const resets = new UnreadResets();
 * resets.look(await undeliveredBy(old)); // each time the connections are looked at
 * resets.count; // 1
 * ```
 */
export class UnreadResets {
  /** Connections seen with unread bytes, by inode: how many looks in a row. */
  #unread = new Map<number, number>();
  /** Connections closed with their client's bytes unread. */
  count = 0;

  look(left: Undelivered | undefined): void {
    if (!left?.unread) return;
    for (const [inode, looks] of this.#unread) {
      if (looks >= 2 && !left.unread.has(inode)) this.count++;
    }
    const next = new Map<number, number>();
    for (const [inode, bytes] of left.unread) {
      if (bytes > 0) next.set(inode, (this.#unread.get(inode) ?? 0) + 1);
    }
    this.#unread = next;
  }
}

/**
 * Marks the drain of the given Envoys as begun, once their stats were read: connections their
 * delayed close timed out on are counted from there. Learns what they listen on too.
 *
 * @example
 * ```ts
 * void drainBegins(envoys.all()); // as drain_listeners is sent
 * ```
 */
export async function drainBegins(live: readonly Epoch[]): Promise<void> {
  await learnListening(live);
  for (const l of live) drainBegun.add(l);
}

/**
 * What the given Envoy processes still have to deliver, summed: kernel send queues and Envoy's
 * own buffers, and (`http2Open`) the HTTP/2 connections of the connection managers with the given
 * stat prefixes (all when undefined) still open; `unchecked` names what could not be looked at.
 * Undefined when /proc cannot tell.
 *
 * @example
 * ```ts
 * const left = await undeliveredBy(envoys.all()); // { connections: 2, sending: 1, bytes: 812_000 }
 * ```
 */
export async function undeliveredBy(
  live: readonly Epoch[],
  prefixes?: ReadonlySet<string>,
): Promise<Undelivered | undefined> {
  // Once for all of them, and only the tables their listeners were found in (each read walks the
  // kernel's whole connection hash); both until those are known.
  const running = live.filter((l) => l.process.running);
  const tables = running.every((l) => l.listenTables.size > 0)
    ? [...new Set(running.flatMap((l) => [...l.listenTables]))]
    : undefined;
  const [table, inodes, stats] = await Promise.all([
    readTcpTable("/proc", tables),
    Promise.all(running.map((l) => socketInodes(l.process.pid))),
    Promise.all(running.map((l) => (readable(l) ? heldBy(l, prefixes) : undefined))),
  ]);
  if (!table || inodes.some((i) => i === undefined)) return undefined;
  const each = await Promise.all(
    running.map((l, i) =>
      undelivered(l.process.pid, {
        listenPorts: l.listenPorts,
        listenTables: l.listenTables,
        table,
        inodes: inodes[i],
      })
    ),
  );
  if (each.some((u) => u === undefined)) return undefined;
  // A hot-restart parent is judged by its connections, as this look read them.
  const held = await Promise.all(
    running.map((l, i) => stats[i] ?? handedOver(l, each[i]!, inodes[i]!)),
  );
  const unchecked = held.flatMap((h) => (h.unchecked ? [h.unchecked] : []));
  const unread = new Map(each.flatMap((u) => [...u!.unread ?? []]));
  const sum = each.reduce<Undelivered>((sum, u) => ({
    connections: sum.connections + u!.connections,
    sending: sum.sending + u!.sending,
    bytes: sum.bytes + u!.bytes,
  }), { connections: 0, sending: 0, bytes: held.reduce((sum, h) => sum + h.bytes, 0) });
  const http2Open = held.reduce((sum, h) => sum + (h.http2Open ?? 0), 0);
  const unseen = new Map(held.flatMap((h) => [...h.unseen ?? []]));
  const open = { ...(http2Open ? { http2Open } : {}), ...(unseen.size ? { unseen } : {}) };
  return { ...sum, unread, ...open, ...(unchecked.length ? { unchecked } : {}) };
}
