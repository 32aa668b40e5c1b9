// The control routes refuse what an Envoy of the agent carries (who made the connection is given
// here; connection-maker.test.ts reads it from a fake /proc), and every body is capped.
import fc from "fast-check";
import { describe, expect, it, vi } from "vitest";
import {
  createStatusApp,
  REQUEST_MAX_BYTES,
  type StatusControls,
} from "../../agent/status/routes.ts";
import type { ConnectionMaker } from "../../agent/status/not-through-envoy.ts";

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
    const answer = {
      reason: "no_drain" as const,
      inbound_closed: false,
      envoy_stopped: false,
      waited_ms: 1000,
    };
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
