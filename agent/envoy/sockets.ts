// An Envoy process's sockets as Linux /proc shows them: the connections it accepted, the response
// bytes each still has to deliver (TCP), and how much the process has written so far.
import { readdir, readFile, readlink } from "node:fs/promises";

/** TCP states of /proc/net/tcp (include/net/tcp_states.h). */
export const TCP_STATE = {
  established: 0x01,
  finWait1: 0x04,
  closeWait: 0x08,
  lastAck: 0x09,
  listen: 0x0a,
  closing: 0x0b,
} as const;

/** One row of /proc/net/tcp or /proc/net/tcp6. */
export interface TcpSocket {
  localAddress: string;
  localPort: number;
  remoteAddress: string;
  remotePort: number;
  state: number;
  /** Bytes written and not yet acknowledged by the peer (for a listening socket: the accept backlog). */
  txQueue: number;
  rxQueue: number;
  inode: number;
  /** The table it was read from, when read by {@linkcode readTcpTable}. */
  table?: TcpTableName;
}

/** The two TCP tables of /proc/net. */
export type TcpTableName = "tcp" | "tcp6";

/** Decodes /proc's hex address: IPv4 as one little-endian word, IPv6 as four. */
function decodeAddress(hex: string): string {
  const words = hex.match(/.{8}/g) ?? [];
  const bytes = words.flatMap((w) => [6, 4, 2, 0].map((i) => parseInt(w.slice(i, i + 2), 16)));
  if (bytes.length === 4) return bytes.join(".");
  if (bytes.slice(0, 10).every((b) => b === 0) && bytes[10] === 0xff && bytes[11] === 0xff) {
    return `::ffff:${bytes.slice(12).join(".")}`;
  }
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(((bytes[i] << 8) | bytes[i + 1]).toString(16));
  return groups.join(":").replace(/(^|:)0(:0)+(:|$)/, "::");
}

/**
 * Parses the text of /proc/net/tcp or /proc/net/tcp6.
 *
 * @example
 * ```ts
 * parseTcpTable(await readFile("/proc/net/tcp", "utf8"))[0].localPort;
 * ```
 */
export function parseTcpTable(text: string, table?: TcpTableName): TcpSocket[] {
  const rows: TcpSocket[] = [];
  for (const line of text.split("\n").slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f.length < 10) continue;
    const [local, remote, state, queues, inode] = [f[1], f[2], f[3], f[4], f[9]];
    const [la, lp] = local.split(":");
    const [ra, rp] = remote.split(":");
    const [tx, rx] = queues.split(":");
    rows.push({
      localAddress: decodeAddress(la),
      localPort: parseInt(lp, 16),
      remoteAddress: decodeAddress(ra),
      remotePort: parseInt(rp, 16),
      state: parseInt(state, 16),
      txQueue: parseInt(tx, 16),
      rxQueue: parseInt(rx, 16),
      inode: Number(inode),
      ...(table ? { table } : {}),
    });
  }
  return rows;
}

/**
 * Every TCP socket of this network namespace, from the given tables (both by default); undefined
 * without /proc. Each read walks the kernel's whole connection hash (several ms whatever the
 * number of sockets): read only the tables that can hold what you look for.
 */
export async function readTcpTable(
  proc = "/proc",
  tables: readonly TcpTableName[] = ["tcp", "tcp6"],
): Promise<TcpSocket[] | undefined> {
  const texts = await Promise.all(
    tables.map((name) => readFile(`${proc}/net/${name}`, "utf8").catch(() => undefined)),
  );
  if (texts.every((t) => t === undefined)) return undefined;
  return texts.flatMap((t, i) => (t === undefined ? [] : parseTcpTable(t, tables[i])));
}

/** Inodes of the sockets process `pid` holds open; undefined when its fds cannot be read. */
export async function socketInodes(pid: number, proc = "/proc"): Promise<Set<number> | undefined> {
  let fds: string[];
  try {
    fds = await readdir(`${proc}/${pid}/fd`);
  } catch {
    return undefined;
  }
  const inodes = new Set<number>();
  await Promise.all(fds.map(async (fd) => {
    const target = await readlink(`${proc}/${pid}/fd/${fd}`).catch(() => "");
    const m = /^socket:\[(\d+)\]$/.exec(target);
    if (m) inodes.add(Number(m[1]));
  }));
  return inodes;
}

/** What one Envoy process still has to deliver on the connections it accepted. */
export interface Undelivered {
  /** Accepted connections it holds open. */
  connections: number;
  /** Of those, the ones with bytes not yet acknowledged by the client. */
  sending: number;
  /** Bytes in those connections' kernel send queues, and (agent/drain/delivery.ts) in Envoy's own buffers. */
  bytes: number;
  /** What could not be looked at (then `bytes` is only what could): never reported as 0 unsent. */
  unchecked?: string[];
  /**
   * HTTP/2 connections of the drained connection managers still open (agent/drain/delivery.ts):
   * their clients may still read what they took; the drain waits for them to close.
   */
  http2Open?: number;
  /**
   * The open connections of Envoys whose own buffers cannot be read (a hot-restart parent, its
   * admin handed to its child), by socket inode: whether this look saw it carrying bytes (TCP:
   * its kernel send queue; unix: its Envoy wrote within the last second). The drain waits for
   * those it saw carrying bytes to close, as for HTTP/2 ones.
   */
  unseen?: Map<number, boolean>;
  /** Each accepted connection by socket inode: the bytes from its client Envoy has not read yet. */
  unread?: Map<number, number>;
  /** Each accepted connection by socket inode: the bytes in its kernel send queue. */
  queued?: Map<number, number>;
}

/**
 * The bytes left undelivered, when everything was looked at; undefined when something could not
 * be (or nothing could: no /proc).
 *
 * @example
 * ```ts
 * knownBytes({ connections: 1, sending: 0, bytes: 0, unchecked: ["2 HTTP/3 connections"] }); // undefined
 * ```
 */
export function knownBytes(left: Undelivered | undefined): number | undefined {
  return left && !left.unchecked?.length ? left.bytes : undefined;
}

/** Options of {@linkcode undelivered}. */
export interface UndeliveredOptions {
  /**
   * The ports seen listening so far: Envoy closes a draining listener after its drain time while
   * connections it accepted live on. Pass the same set on every call for one process (it gathers
   * the ports), and call once while the process serves.
   */
  listenPorts?: Set<number>;
  /** The tables those listening sockets were found in (gathered like `listenPorts`). */
  listenTables?: Set<TcpTableName>;
  /** The table to look in, when the caller read it once for several processes. */
  table?: TcpSocket[];
  /** The process's socket inodes ({@linkcode socketInodes}), when the caller read them already. */
  inodes?: Set<number>;
  /** Where procfs is mounted. @default "/proc" */
  proc?: string;
}

/**
 * The connections `pid` accepted on its listening sockets (shared with a hot-restart parent or
 * child) and the response bytes still queued on them.
 *
 * @returns undefined where /proc cannot tell (not Linux, or another user's process)
 * @example
 * ```ts
 * const listenPorts = new Set<number>();
 * const u = await undelivered(envoy.pid, { listenPorts }); // { connections: 3, sending: 1, bytes: 1_600_000 }
 * ```
 */
export async function undelivered(
  pid: number,
  options: UndeliveredOptions = {},
): Promise<Undelivered | undefined> {
  const { listenPorts = new Set<number>(), listenTables, proc = "/proc" } = options;
  const [inodes, table] = await Promise.all([
    options.inodes ?? socketInodes(pid, proc),
    options.table ?? readTcpTable(proc),
  ]);
  if (!inodes || !table) return undefined;
  const own = table.filter((s) => inodes.has(s.inode));
  for (const s of own) {
    if (s.state !== TCP_STATE.listen) continue;
    listenPorts.add(s.localPort);
    if (s.table) listenTables?.add(s.table);
  }
  const unread = new Map<number, number>();
  const queued = new Map<number, number>();
  const result: Undelivered = { connections: 0, sending: 0, bytes: 0, unread, queued };
  for (const s of own) {
    if (s.state === TCP_STATE.listen || !listenPorts.has(s.localPort)) continue;
    result.connections++;
    unread.set(s.inode, s.rxQueue);
    queued.set(s.inode, s.txQueue);
    if (s.txQueue > 0) {
      result.sending++;
      result.bytes += s.txQueue;
    }
  }
  return result;
}

/** One row of /proc/net/unix. */
export interface UnixSocket {
  /** Listening (`__SO_ACCEPTCON`). */
  listening: boolean;
  inode: number;
  /** The bound path (`@…` in the abstract namespace); an accepted socket shows its listener's. */
  path?: string;
}

/**
 * Parses the text of /proc/net/unix.
 *
 * @example
 * ```ts
 * parseUnixTable(await readFile("/proc/net/unix", "utf8")).filter((s) => s.listening);
 * ```
 */
export function parseUnixTable(text: string): UnixSocket[] {
  const rows: UnixSocket[] = [];
  for (const line of text.split("\n").slice(1)) {
    // Seven fields, then the path as the kernel wrote it (it may hold spaces).
    const m = /^\s*\S+\s+\S+\s+\S+\s+([0-9A-Fa-f]+)\s+\S+\s+\S+\s+(\d+)(?: (.*))?$/.exec(line);
    if (!m) continue;
    rows.push({
      listening: (parseInt(m[1], 16) & 0x10000) !== 0,
      inode: Number(m[2]),
      ...(m[3] ? { path: m[3] } : {}),
    });
  }
  return rows;
}

/**
 * The connections `pid` accepted on its unix-socket listeners, by inode (their paths are gathered
 * in `listenPaths`, as {@linkcode undelivered} gathers ports); `exclude` names paths that are not
 * listeners of its traffic (its admin); `known`, its socket inodes when the caller read them
 * already. The kernel shows no queue sizes there.
 *
 * @returns undefined where /proc cannot tell
 * @example
 * ```ts
 * await unixConnections(envoy.pid, new Set()); // [48213]
 * ```
 */
export async function unixConnections(
  pid: number,
  listenPaths: Set<string>,
  exclude: readonly string[] = [],
  proc = "/proc",
  known?: Set<number>,
): Promise<number[] | undefined> {
  const [inodes, text] = await Promise.all([
    known ?? socketInodes(pid, proc),
    readFile(`${proc}/net/unix`, "utf8").catch(() => undefined),
  ]);
  if (!inodes || text === undefined) return undefined;
  const own = parseUnixTable(text).filter((s) =>
    inodes.has(s.inode) && s.path !== undefined && !exclude.includes(s.path)
  );
  for (const s of own) if (s.listening) listenPaths.add(s.path!);
  return own.filter((s) => !s.listening && listenPaths.has(s.path!)).map((s) => s.inode);
}

/**
 * The bytes process `pid` has passed to write(2) and writev(2) since it started, its sockets'
 * included (`wchar` of /proc/<pid>/io): while it grows, the process is still writing somewhere.
 *
 * @returns undefined where /proc cannot tell (not Linux, or another user's process)
 * @example
 * ```ts
 * await bytesWritten(envoy.pid); // 31_457_280
 * ```
 */
export async function bytesWritten(pid: number, proc = "/proc"): Promise<number | undefined> {
  const text = await readFile(`${proc}/${pid}/io`, "utf8").catch(() => undefined);
  const m = text === undefined ? null : /^wchar:\s*(\d+)$/m.exec(text);
  return m ? Number(m[1]) : undefined;
}
