import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { connect, createServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { afterEach, describe, expect, it } from "vitest";
import {
  bytesWritten,
  parseTcpTable,
  TCP_STATE,
  type TcpSocket,
  undelivered,
  unixConnections,
} from "../../agent/envoy/sockets.ts";

const HEADER =
  "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n";
const hex = (n: number, width: number) => n.toString(16).toUpperCase().padStart(width, "0");
/** An IPv4 address as the kernel writes it: one little-endian word. */
const v4 = (address: string) => address.split(".").map((b) => hex(Number(b), 2)).reverse().join("");

/** One row of /proc/net/tcp as the kernel formats it (fields this module reads, the rest zeros). */
function row(i: number, s: TcpSocket): string {
  return `  ${i}: ${v4(s.localAddress)}:${hex(s.localPort, 4)} ${v4(s.remoteAddress)}:${
    hex(s.remotePort, 4)
  } ${hex(s.state, 2)} ` +
    `${hex(s.txQueue, 8)}:${
      hex(s.rxQueue, 8)
    } 00:00000000 00000000     0        0 ${s.inode} 1 0000000000000000 20 4 30 10 -1\n`;
}

const socketArb = fc.record({
  localAddress: fc.ipV4(),
  localPort: fc.integer({ min: 0, max: 65535 }),
  remoteAddress: fc.ipV4(),
  remotePort: fc.integer({ min: 0, max: 65535 }),
  state: fc.integer({ min: 1, max: 12 }),
  txQueue: fc.integer({ min: 0, max: 0x7fffffff }),
  rxQueue: fc.integer({ min: 0, max: 0x7fffffff }),
  inode: fc.integer({ min: 0, max: 2 ** 32 }),
});

describe("parseTcpTable", () => {
  it("reads back every IPv4 row the kernel writes", () => {
    fc.assert(fc.property(fc.array(socketArb, { maxLength: 20 }), (sockets) => {
      expect(parseTcpTable(HEADER + sockets.map((s, i) => row(i, s)).join(""))).toEqual(sockets);
    }));
  });

  it("reads an IPv6 row, and an IPv4-mapped one", () => {
    const text = HEADER +
      "   0: 00000000000000000000000001000000:3AA8 00000000000000000000000001000000:9C40 01 00000010:00000000 00:00000000 00000000     0        0 77 1\n" +
      "   1: 0000000000000000FFFF00000100007F:3AA8 0000000000000000FFFF00000100007F:9C41 01 00000000:00000000 00:00000000 00000000     0        0 78 1\n";
    expect(
      parseTcpTable(text).map((
        s,
      ) => [s.localAddress, s.localPort, s.remotePort, s.txQueue, s.inode]),
    ).toEqual([
      ["::1", 15016, 40000, 16, 77],
      ["::ffff:127.0.0.1", 15016, 40001, 0, 78],
    ]);
  });
});

describe("undelivered", () => {
  let proc = "";
  afterEach(() => rmSync(proc, { recursive: true, force: true }));

  /** A fake procfs: process `pid` holds `inodes`; the table holds `sockets`. */
  function fakeProc(pid: number, inodes: number[], sockets: TcpSocket[]): string {
    proc = mkdtempSync(join(tmpdir(), "lastcall-proc-"));
    mkdirSync(join(proc, "net"));
    mkdirSync(join(proc, String(pid), "fd"), { recursive: true });
    inodes.forEach((inode, fd) =>
      symlinkSync(`socket:[${inode}]`, join(proc, String(pid), "fd", String(fd)))
    );
    writeFileSync(join(proc, "net", "tcp"), HEADER + sockets.map((s, i) => row(i, s)).join(""));
    return proc;
  }
  const sock = (s: Partial<TcpSocket>): TcpSocket => ({
    localAddress: "127.0.0.1",
    localPort: 0,
    remoteAddress: "127.0.0.1",
    remotePort: 0,
    state: TCP_STATE.established,
    txQueue: 0,
    rxQueue: 0,
    inode: 0,
    ...s,
  });

  it("counts the connections the process accepted, the bytes queued on them and those their clients sent that it has not read, not its upstream ones nor others'", async () => {
    const root = fakeProc(42, [1, 2, 3, 4], [
      sock({ localPort: 10000, state: TCP_STATE.listen, inode: 1 }),
      sock({ localPort: 10000, remotePort: 50000, txQueue: 1_600_000, inode: 2 }), // a slow reader
      sock({ localPort: 10000, remotePort: 50001, rxQueue: 40, inode: 3 }), // a request not read yet
      sock({ localPort: 41000, remotePort: 8080, txQueue: 999, inode: 4 }), // Envoy's upstream connection
      sock({ localPort: 10000, remotePort: 50002, txQueue: 7, inode: 9 }), // not Envoy's (an orphan)
    ]);
    expect(await undelivered(42, { proc: root })).toEqual({
      connections: 2,
      sending: 1,
      bytes: 1_600_000,
      unread: new Map([[2, 0], [3, 40]]),
      queued: new Map([[2, 1_600_000], [3, 0]]),
    });
  });

  it("remembers the listening ports once the listener is closed (a draining Envoy's)", async () => {
    const listenPorts = new Set([10000]);
    const root = fakeProc(42, [2], [
      sock({ localPort: 10000, remotePort: 50000, txQueue: 5, inode: 2 }),
    ]);
    expect(await undelivered(42, { proc: root })).toEqual({
      connections: 0,
      sending: 0,
      bytes: 0,
      unread: new Map(),
      queued: new Map(),
    });
    expect(await undelivered(42, { proc: root, listenPorts })).toEqual({
      connections: 1,
      sending: 1,
      bytes: 5,
      unread: new Map([[2, 0]]),
      queued: new Map([[2, 5]]),
    });
  });

  it("cannot tell without the process or without the table", async () => {
    const root = fakeProc(42, [], []);
    expect(await undelivered(43, { proc: root })).toBeUndefined();
    rmSync(join(root, "net"), { recursive: true });
    expect(await undelivered(42, { proc: root })).toBeUndefined();
  });
});

describe("unixConnections", () => {
  it("names the connections a process accepted on its unix-socket listeners, and remembers the path once the listener is closed", async () => {
    const dir = mkdtempSync(join(tmpdir(), "lastcall-unix-"));
    const path = join(dir, "in.sock");
    const server = createServer();
    await new Promise<void>((done) => server.listen(path, done));
    const accepted = new Promise<Socket>((done) => server.once("connection", done));
    const client = connect(path);
    await Promise.all([accepted, new Promise((done) => client.once("connect", done))]);
    try {
      const paths = new Set<string>();
      const inodes = await unixConnections(process.pid, paths);
      expect(paths).toEqual(new Set([path]));
      expect(inodes).toHaveLength(1); // the accepted one: the client's socket has no path
      expect(await unixConnections(process.pid, new Set(), [path])).toEqual([]); // an admin's
      server.close(); // closes the listening socket at once; the connection stays
      expect(await unixConnections(process.pid, new Set())).toEqual([]);
      expect(await unixConnections(process.pid, paths)).toEqual(inodes);
    } finally {
      client.destroy();
      (await accepted).destroy();
      server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("bytesWritten", () => {
  it("grows by what the process writes; undefined for no such process", async () => {
    const dir = mkdtempSync(join(tmpdir(), "lastcall-io-"));
    try {
      const before = await bytesWritten(process.pid);
      writeFileSync(join(dir, "f"), Buffer.alloc(100_000));
      expect((await bytesWritten(process.pid))! - before!).toBeGreaterThanOrEqual(100_000);
      expect(await bytesWritten(process.pid, dir)).toBeUndefined();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
