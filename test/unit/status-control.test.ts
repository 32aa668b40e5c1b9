// The control routes refuse what an Envoy of the agent carries (told from a fake /proc), and every
// body is capped.
import fc from "fast-check";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import {
  createStatusApp,
  REQUEST_MAX_BYTES,
  type StatusControls,
} from "../../agent/status/routes.ts";
import { type ConnectionMaker, connectionMaker } from "../../agent/status/not-through-envoy.ts";

const TOKEN = "s3cret-token-0123456789abcdef";
const STATUS_PORT = 15020;

function fakeControls(maker: ConnectionMaker = { kind: "other" }) {
  return {
    readiness: vi.fn(() => Promise.resolve({ ready: true, reason: "running" })),
    state: vi.fn(() =>
      ({
        phase: "running",
        epochs: [],
        restarts: 0,
        hotRestarts: 0,
        reloadsRejected: 0,
        inflight: 0,
        filter: "reporting",
      }) as ReturnType<StatusControls["state"]>
    ),
    metrics: vi.fn(() => Promise.resolve("lastcall_ready 1\n")),
    reportToken: TOKEN,
    report: vi.fn(() => Promise.resolve({ draining: false })),
    quit: vi.fn(),
    drain: vi.fn(),
    app: vi.fn(() => true),
    connectionMaker: vi.fn(() => Promise.resolve(maker)),
  } satisfies StatusControls;
}

/** Bindings of a loopback connection from port 40000 to the status port. */
const loopback = {
  incoming: {
    socket: {
      remoteAddress: "127.0.0.1",
      remotePort: 40000,
      localPort: STATUS_PORT,
      remoteFamily: "IPv4",
    },
  },
};

const APP_BODY = JSON.stringify({ state: "running", id: "web" });
const controlRoutes = [
  { path: "/quitquitquit", call: "quit", body: undefined },
  { path: "/drain", call: "drain", body: undefined },
  { path: "/v1/app", call: "app", body: APP_BODY },
] as const;

describe("control routes refuse connections an Envoy of the agent made", () => {
  it.each(controlRoutes)(
    "$path from Envoy: 403 naming the route and the pid, nothing done",
    async ({ path, call, body }) => {
      const controls = fakeControls({ kind: "envoy", pid: 4242 });
      const res = await createStatusApp(controls).request(path, { method: "POST", body }, loopback);
      expect(res.status).toBe(403);
      expect(await res.json()).toEqual({
        error:
          `POST ${path} is not accepted through Envoy: the connection comes from Envoy pid 4242`,
      });
      expect(controls.connectionMaker).toHaveBeenCalledWith({
        clientPort: 40000,
        serverPort: STATUS_PORT,
      });
      expect(controls[call]).not.toHaveBeenCalled();
    },
  );

  it.each(controlRoutes)(
    "$path when /proc cannot find the caller: 403 (fail closed)",
    async ({ path, call, body }) => {
      const controls = fakeControls({
        kind: "unknown",
        why: "no client socket for port 40000 in /proc/net/tcp",
      });
      const res = await createStatusApp(controls).request(path, { method: "POST", body }, loopback);
      expect(res.status).toBe(403);
      expect(await res.json()).toEqual({
        error:
          `POST ${path} is refused: cannot tell who is calling (no client socket for port 40000 in /proc/net/tcp)`,
      });
      expect(controls[call]).not.toHaveBeenCalled();
    },
  );

  it.each(controlRoutes)(
    "$path from another loopback process: 200",
    async ({ path, call, body }) => {
      const controls = fakeControls({ kind: "other" });
      expect(
        (await createStatusApp(controls).request(path, { method: "POST", body }, loopback)).status,
      ).toBe(200);
      expect(controls[call]).toHaveBeenCalledOnce();
    },
  );

  it.each(controlRoutes)(
    "$path without /proc (not Linux): the loopback rule alone, 200",
    async ({ path, call, body }) => {
      const controls = fakeControls({ kind: "untold" });
      expect(
        (await createStatusApp(controls).request(path, { method: "POST", body }, loopback)).status,
      ).toBe(200);
      expect(controls[call]).toHaveBeenCalledOnce();
    },
  );

  it.each(controlRoutes)(
    "$path on a loopback peer with no ports to look up: 403",
    async ({ path, call, body }) => {
      const controls = fakeControls();
      const bindings = {
        incoming: { socket: { remoteAddress: "127.0.0.1", remoteFamily: "IPv4" } },
      };
      const res = await createStatusApp(controls).request(path, { method: "POST", body }, bindings);
      expect(res.status).toBe(403);
      expect(await res.json()).toEqual({
        error: `POST ${path} is refused: no socket tells who is calling`,
      });
      expect(controls.connectionMaker).not.toHaveBeenCalled();
      expect(controls[call]).not.toHaveBeenCalled();
    },
  );

  it("probes, state, metrics and reports never ask who is calling (Envoy may reach them)", async () => {
    const controls = fakeControls({ kind: "envoy", pid: 4242 });
    const app = createStatusApp(controls);
    for (const path of ["/healthz/ready", "/healthz/live", "/v1/state", "/metrics"]) {
      expect((await app.request(path, {}, loopback)).status, path).toBe(200);
    }
    const report = { instance: "a", epoch: 0, inflight: 0, draining: false, reason: "heartbeat" };
    const res = await app.request("/v1/inflight", {
      method: "POST",
      headers: { "x-lastcall-token": TOKEN },
      body: JSON.stringify(report),
    }, loopback);
    expect(res.status).toBe(200);
    expect(controls.report).toHaveBeenCalledOnce();
    expect(controls.connectionMaker).not.toHaveBeenCalled();
  });

  it("GET /v1/app-stop (an httpGet preStop, sent by the kubelet to the pod's IP) is open to any peer and only asks the agent to wait", async () => {
    const answer = { reason: "no_drain" as const, inbound_closed: false, waited_ms: 1000 };
    const controls = {
      ...fakeControls({ kind: "envoy", pid: 4242 }),
      appStop: vi.fn(() => Promise.resolve(answer)),
    };
    const remote = {
      incoming: {
        socket: {
          remoteAddress: "10.0.0.7",
          remotePort: 40000,
          localPort: STATUS_PORT,
          remoteFamily: "IPv4",
        },
      },
    };
    const res = await createStatusApp(controls).request("/v1/app-stop", {}, remote);
    expect([res.status, await res.json()]).toEqual([200, answer]);
    expect(controls.appStop).toHaveBeenCalledOnce();
    for (const call of ["drain", "quit", "app"] as const) {
      expect(controls[call]).not.toHaveBeenCalled();
    }
  });

  it("POST /drain?sidecar=native (lastcall drain) tells the agent the caller is a native sidecar's preStop; a plain POST /drain does not", async () => {
    const controls = fakeControls();
    const app = createStatusApp(controls);
    expect((await app.request("/drain?sidecar=native", { method: "POST" }, loopback)).status).toBe(
      200,
    );
    expect((await app.request("/drain", { method: "POST" }, loopback)).status).toBe(200);
    expect(controls.drain.mock.calls).toEqual([[{ nativeSidecar: true }], [{
      nativeSidecar: false,
    }]]);
  });

  it("POST /drain?asked_at=N passes when its caller started; anything but whole milliseconds is refused (400, naming it), no drain", async () => {
    const controls = fakeControls();
    const app = createStatusApp(controls);
    const post = (query: string) => app.request(`/drain?${query}`, { method: "POST" }, loopback);
    expect((await post("sidecar=native&asked_at=1795791665709")).status).toBe(200);
    expect(controls.drain.mock.calls).toEqual([[{
      nativeSidecar: true,
      askedAt: 1795791665709,
    }]]);
    for (const bad of ["", "-5", "1.5", "soon", "1e12", "9".repeat(16)]) {
      const res = await post(`sidecar=native&asked_at=${bad}`);
      expect([res.status, await res.json()]).toEqual([400, {
        error: `asked_at "${bad}" is not a time in whole milliseconds since the epoch`,
      }]);
    }
    expect(controls.drain).toHaveBeenCalledOnce();
  });
});

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

describe("every body is capped", () => {
  const capError = { error: `request body larger than ${REQUEST_MAX_BYTES} bytes` };

  /** A stream of `chunks` KiB, counting what was pulled. */
  function bigStream(chunks: number) {
    const pulled = { count: 0 };
    const stream = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (++pulled.count > chunks) return controller.close();
        controller.enqueue(new Uint8Array(1024).fill(0x20));
      },
    });
    return { stream, pulled };
  }

  it.each(["/v1/app", "/drain", "/quitquitquit", "/nowhere", "/healthz/ready"])(
    "POST %s with a content-length over the cap: 413 and one JSON line, nothing done",
    async (path) => {
      const controls = fakeControls();
      const res = await createStatusApp(controls).request(path, {
        method: "POST",
        body: " ".repeat(REQUEST_MAX_BYTES + 1),
      }, loopback);
      expect(res.status).toBe(413);
      expect(await res.text()).toBe(JSON.stringify(capError));
      for (const call of ["app", "drain", "quit"] as const) {
        expect(controls[call]).not.toHaveBeenCalled();
      }
    },
  );

  it.each(["/v1/app", "/drain", "/quitquitquit"])(
    "POST %s streaming 200 MB: 413 after a few KiB",
    async (path) => {
      const controls = fakeControls();
      const { stream, pulled } = bigStream(200 * 1024);
      const res = await createStatusApp(controls).request(
        path,
        { method: "POST", body: stream, duplex: "half" } as RequestInit,
        loopback,
      );
      expect(res.status).toBe(413);
      expect(await res.json()).toEqual(capError);
      expect(pulled.count).toBeLessThan(10);
      for (const call of ["app", "drain", "quit"] as const) {
        expect(controls[call]).not
          .toHaveBeenCalled();
      }
    },
  );

  it("POST /v1/app takes a body up to the cap, refuses one byte more", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: APP_BODY.length, max: REQUEST_MAX_BYTES + 64 }),
        async (size) => {
          const controls = fakeControls();
          const body = APP_BODY.slice(0, -1) + " ".repeat(size - APP_BODY.length) + "}";
          const res = await createStatusApp(controls).request(
            "/v1/app",
            { method: "POST", body },
            loopback,
          );
          expect(res.status).toBe(size <= REQUEST_MAX_BYTES ? 200 : 413);
          expect(controls.app).toHaveBeenCalledTimes(size <= REQUEST_MAX_BYTES ? 1 : 0);
        },
      ),
      { numRuns: 60 },
    );
  });
});
