// Who made a connection, read from a fake /proc: the TCP tables (v4 and v4-mapped v6) and the
// socket inodes each process holds. The control routes refuse what an Envoy of the agent made.
import fc from "fast-check";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { connectionMaker } from "../../agent/status/not-through-envoy.ts";

const STATUS_PORT = 15020;

describe("connectionMaker reads /proc", () => {
  let proc: string | undefined;
  afterEach(() => {
    if (proc) rmSync(proc, { recursive: true, force: true });
    proc = undefined;
  });

  const hex = (n: number, width: number) => n.toString(16).toUpperCase().padStart(width, "0");
  const LOOPBACK4 = "0100007F";
  const LOOPBACK6_MAPPED = "0000000000000000FFFF00000100007F";
  interface Row {
    local: number;
    remote: number;
    state?: number;
    inode: number;
    v6?: boolean;
  }
  const line = (r: Row, i: number) => {
    const address = r.v6 ? LOOPBACK6_MAPPED : LOOPBACK4;
    return `  ${i}: ${address}:${hex(r.local, 4)} ${address}:${hex(r.remote, 4)} ${
      hex(r.state ?? 1, 2)
    } 00000000:00000000 00:00000000 00000000  1000        0 ${r.inode} 1 0000000000000000 20 4 30 10 -1`;
  };

  /** A fake /proc: the TCP tables, and per pid the socket inodes it holds (null: a pid without an fd folder). */
  function fakeProc(
    rows: Row[],
    owners: Record<number, number[] | null>,
    options: { tables?: boolean } = {},
  ): string {
    const root = mkdtempSync(join(tmpdir(), "lastcall-proc-"));
    proc = root;
    mkdirSync(join(root, "net"));
    if (options.tables !== false) {
      const header =
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode";
      writeFileSync(
        join(root, "net/tcp"),
        [header, ...rows.filter((r) => !r.v6).map(line)].join("\n") + "\n",
      );
      writeFileSync(
        join(root, "net/tcp6"),
        [header, ...rows.filter((r) => r.v6).map(line)].join("\n") + "\n",
      );
    }
    for (const [pid, inodes] of Object.entries(owners)) {
      mkdirSync(join(root, pid));
      if (inodes === null) continue;
      mkdirSync(join(root, pid, "fd"));
      symlinkSync("/dev/null", join(root, pid, "fd", "0"));
      inodes.forEach((inode, i) =>
        symlinkSync(`socket:[${inode}]`, join(root, pid, "fd", String(i + 3)))
      );
    }
    return root;
  }

  const ports = { clientPort: 40000, serverPort: STATUS_PORT };
  // The server's listening socket and its accepted end are in the table too, with the ports reversed.
  const serverRows: Row[] = [
    { local: STATUS_PORT, remote: 0, state: 0x0a, inode: 500 },
    { local: STATUS_PORT, remote: 40000, inode: 501 },
  ];

  it("an Envoy's socket: envoy, with its pid", async () => {
    const root = fakeProc([...serverRows, { local: 40000, remote: STATUS_PORT, inode: 777 }], {
      10: [500, 501],
      20: [776, 777],
    });
    expect(await connectionMaker(ports, [20], root)).toEqual({ kind: "envoy", pid: 20 });
  });

  it("an IPv4-mapped socket in tcp6 is found too", async () => {
    const root = fakeProc([{ local: 40000, remote: STATUS_PORT, inode: 777, v6: true }], {
      20: [777],
    });
    expect(await connectionMaker(ports, [20], root)).toEqual({ kind: "envoy", pid: 20 });
  });

  it("another process's socket: other", async () => {
    const root = fakeProc([...serverRows, { local: 40000, remote: STATUS_PORT, inode: 777 }], {
      20: [776],
      30: [777],
    });
    expect(await connectionMaker(ports, [20], root)).toEqual({ kind: "other" });
  });

  it("an Envoy that has exited (no /proc entry) holds nothing: other", async () => {
    const root = fakeProc([{ local: 40000, remote: STATUS_PORT, inode: 777 }], { 30: [777] });
    expect(await connectionMaker(ports, [20], root)).toEqual({ kind: "other" });
  });

  it("an Envoy whose fds cannot be read: unknown", async () => {
    const root = fakeProc([{ local: 40000, remote: STATUS_PORT, inode: 777 }], {
      20: null,
      30: [777],
    });
    expect(await connectionMaker(ports, [20], root)).toEqual({
      kind: "unknown",
      why: "cannot read the sockets of Envoy pid 20",
    });
  });

  it.each<[string, Row[]]>([
    ["no row with these ports", serverRows],
    ["only a TIME_WAIT row (inode 0)", [{
      local: 40000,
      remote: STATUS_PORT,
      state: 0x06,
      inode: 0,
    }]],
    ["the ports of another server", [{ local: 40000, remote: STATUS_PORT + 1, inode: 777 }]],
  ])("%s: unknown (refused)", async (_name, rows) => {
    const root = fakeProc(rows, { 20: [777] });
    const maker = await connectionMaker(ports, [20], root);
    expect(maker).toEqual({
      kind: "unknown",
      why: `no client socket for port 40000 in ${root}/net/tcp`,
    });
  });

  it("no TCP tables (not Linux): untold", async () => {
    const root = fakeProc([], {}, { tables: false });
    expect(await connectionMaker(ports, [20], root)).toEqual({ kind: "untold" });
  });

  it("envoy exactly when one of the Envoys holds the client socket", async () => {
    const owner = fc.constantFrom("envoy-a", "envoy-b", "other", "nobody");
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 1024, max: 65535 }), owner, async (clientPort, who) => {
        fc.pre(clientPort !== STATUS_PORT);
        const held = { "envoy-a": 101, "envoy-b": 102, other: 103, nobody: 0 }[who];
        const root = fakeProc(
          [{ local: clientPort, remote: STATUS_PORT, inode: 900 }],
          Object.fromEntries(
            [101, 102, 103].map((pid) => [pid, held === pid ? [900] : [pid - 100]]),
          ),
        );
        try {
          const maker = await connectionMaker(
            { clientPort, serverPort: STATUS_PORT },
            [101, 102],
            root,
          );
          if (who === "envoy-a") expect(maker).toEqual({ kind: "envoy", pid: 101 });
          else if (who === "envoy-b") expect(maker).toEqual({ kind: "envoy", pid: 102 });
          else expect(maker).toEqual({ kind: "other" });
        } finally {
          rmSync(root, { recursive: true, force: true });
          proc = undefined;
        }
      }),
      { numRuns: 40 },
    );
  });
});
