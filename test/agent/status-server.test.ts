// The status server on a real socket: on 0.0.0.0 a caller inside the pod (loopback) can stop or
// drain it; bound before its app, a request waits; at lastcall's start a probe is never refused
// once the port is bound.
import { subscribe, unsubscribe } from "node:diagnostics_channel";
import { request, type Server } from "node:http";
import { Hono } from "hono";
import { afterEach, describe, expect, it, vi } from "vitest";
import {
  createStatusApp,
  REPORT_MAX_BYTES,
  type StatusControls,
} from "../../agent/status/routes.ts";
import { bindStatus, listen, type StatusServer } from "../../agent/status/listen.ts";
import { connectionMaker } from "../../agent/status/not-through-envoy.ts";
import { reportCall, reportFront } from "../../agent/status/report-route.ts";
import { freePort, inboundConfig, startLastcall } from "../support/lastcall.ts";

const TOKEN = "0123456789abcdef-status-server";

/** Controls whose "Envoys" are `envoyPids`: who made each connection is read from the real /proc. */
function fakeControls(envoyPids: number[] = []) {
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
    metrics: vi.fn(() => Promise.resolve("")),
    reportToken: TOKEN,
    report: vi.fn(() => Promise.resolve({ draining: true, probe: 5 })),
    quit: vi.fn(),
    drain: vi.fn(),
    connectionMaker: vi.fn((ports: { clientPort: number; serverPort: number }) =>
      connectionMaker(ports, envoyPids)
    ),
  } satisfies StatusControls;
}

/** Resolves once a request reaches the server on `port` (node:http's own diagnostics channel). */
function arrival(port: number): Promise<void> {
  const channel = "http.server.request.start";
  return new Promise((resolve) => {
    const seen = (message: unknown) => {
      if (((message as { server: Server }).server.address() as { port: number }).port !== port) {
        return;
      }
      unsubscribe(channel, seen);
      resolve();
    };
    subscribe(channel, seen);
  });
}

let server: StatusServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

async function serve(envoyPids: number[] = []) {
  const controls = fakeControls(envoyPids);
  // As the agent serves them: the filter's reports answered before Hono (report-route.ts).
  server = await listen(createStatusApp(controls), "0.0.0.0", 0, reportFront(reportCall(controls)));
  return { controls, url: (host: string) => `http://${host}:${server!.port}` };
}

describe("bound to 0.0.0.0", () => {
  it("POST /quitquitquit and /drain from 127.0.0.1: 200", async () => {
    const { controls, url } = await serve();
    expect((await fetch(`${url("127.0.0.1")}/quitquitquit`, { method: "POST" })).status).toBe(200);
    expect((await fetch(`${url("127.0.0.1")}/drain`, { method: "POST" })).status).toBe(200);
    expect(controls.quit).toHaveBeenCalledOnce();
    expect(controls.drain).toHaveBeenCalledOnce();
  });

  it.runIf(process.platform === "linux")(
    "POST /quitquitquit and /drain from a process the agent supervises as Envoy: 403, told by /proc",
    async () => {
      // This test process plays the Envoy: the client socket of its own fetch is one of its fds.
      const { controls, url } = await serve([process.pid]);
      for (const path of ["/quitquitquit", "/drain"]) {
        const res = await fetch(`${url("127.0.0.1")}${path}`, { method: "POST" });
        expect(res.status).toBe(403);
        expect(await res.json()).toEqual({
          error:
            `POST ${path} is not accepted through Envoy: the connection comes from Envoy pid ${process.pid}`,
        });
      }
      expect(controls.quit).not.toHaveBeenCalled();
      expect(controls.drain).not.toHaveBeenCalled();
      expect((await fetch(`${url("127.0.0.1")}/healthz/ready`)).status).toBe(200);
    },
  );
});

describe("report bodies over a real connection", () => {
  /** Posts `size` bytes to /v1/inflight, with content-length or chunked; resolves with the status. */
  function post(port: number, size: number, chunked: boolean): Promise<number> {
    return new Promise((resolve, reject) => {
      const headers: Record<string, string | number> = {
        "x-lastcall-token": TOKEN,
        "content-type": "application/json",
      };
      if (!chunked) headers["content-length"] = size;
      const req = request({
        host: "127.0.0.1",
        port,
        method: "POST",
        path: "/v1/inflight",
        headers,
      }, (res) => {
        res.resume();
        resolve(res.statusCode!);
      });
      req.on("error", reject);
      const chunk = Buffer.alloc(1024, 0x20);
      for (let sent = 0; sent < size; sent += chunk.length) {
        req.write(chunk.subarray(0, Math.min(chunk.length, size - sent)));
      }
      req.end();
    });
  }

  it("answered before Hono, a report gets what app.request() gets: status, headers and body", async () => {
    const { controls, url } = await serve();
    const init = {
      method: "POST",
      headers: { "x-lastcall-token": TOKEN, "content-type": "application/json" },
      body: JSON.stringify({
        instance: "a",
        epoch: 0,
        inflight: 0,
        draining: true,
        reason: "zero",
      }),
    };
    const direct = await fetch(`${url("127.0.0.1")}/v1/inflight`, init);
    const routed = await createStatusApp(controls).request("/v1/inflight", init);
    for (const res of [direct, routed]) {
      expect(res.status).toBe(200);
      expect(res.headers.get("x-lastcall-draining")).toBe("1");
      expect(res.headers.get("x-lastcall-probe")).toBe("5");
      expect(await res.json()).toEqual({ draining: true, probe: 5 });
    }
    expect(controls.report).toHaveBeenCalledTimes(2);
  });

  it.each([["content-length", false], ["chunked", true]])(
    "over 16 KiB with %s: 413",
    async (_name, chunked) => {
      const { controls } = await serve();
      expect(await post(server!.port, REPORT_MAX_BYTES + 1, chunked as boolean)).toBe(413);
      expect(controls.report).not.toHaveBeenCalled();
    },
  );
});

describe("bound before its app, held until warmed (the agent's status port at start)", () => {
  it("a request that came first waits for the app and the warm-up, then is answered", async () => {
    const controls = fakeControls();
    const bound = await bindStatus("127.0.0.1", 0, { held: true });
    server = bound;
    let answered = false;
    const arrived = arrival(bound.port);
    const early = fetch(`http://127.0.0.1:${bound.port}/healthz/ready`).then((res) => {
      answered = true;
      return res.status;
    });
    await arrived;
    // Nothing answers before both: negatives, so bounded looks (they pass only if it waits).
    await new Promise((done) => setTimeout(done, 300));
    expect(answered).toBe(false);
    bound.serve(createStatusApp(controls));
    await new Promise((done) => setTimeout(done, 300));
    expect(answered).toBe(false);
    expect(controls.readiness).not.toHaveBeenCalled();
    await bound.warm();
    expect(await early).toBe(200);
    expect(controls.readiness).toHaveBeenCalledOnce();
  });

  it("closed before it was warmed (stopped before Envoy's spawn), a held request gets a 503", async () => {
    const bound = await bindStatus("127.0.0.1", 0, { held: true });
    bound.serve(createStatusApp(fakeControls()));
    const arrived = arrival(bound.port);
    const held = fetch(`http://127.0.0.1:${bound.port}/healthz/ready?wait_ms=5000`);
    await arrived; // the request has reached the server, which holds it
    await bound.close();
    const res = await held;
    expect(res.status).toBe(503);
    // Its connection closes with the answer: the server's close does not wait out its grace.
    expect(res.headers.get("connection")).toBe("close");
    expect(await res.json()).toEqual({ ready: false, reason: "lastcall is stopping" });
  });

  it.each(["127.0.0.1", "0.0.0.0", "::"])(
    "warmed on %s, it asks itself GET /healthz/live once, however often it is warmed",
    async (address) => {
      const asked: string[] = [];
      const bound = await bindStatus(address, 0, { held: true });
      server = bound;
      bound.serve(
        new Hono().get("/healthz/live", (c) => {
          asked.push(c.req.header("host") ?? "");
          return c.json({ live: true });
        }),
      );
      await bound.warm();
      await bound.warm(); // each Envoy's spawn warms it: a reload, a crash restart
      expect(asked).toEqual([
        `${address === "::" ? "[::1]" : "127.0.0.1"}:${bound.port}`,
      ]);
    },
  );

  it("listen (not held): the first request loads the handler itself", async () => {
    const { url } = await serve();
    expect((await fetch(`${url("127.0.0.1")}/healthz/live`)).status).toBe(200);
  });
});

describe("lastcall's own start (real Envoy, the single executable)", () => {
  it("a probe sent the moment the status port accepts is held and answered 200 once Envoy is LIVE", async () => {
    const port = await freePort();
    const lc = startLastcall(inboundConfig({ upstreamPort: 9 }), {
      runtime: "binary",
      args: ["--status-port", String(port)],
    });
    try {
      // Refused only before the bind; from then on the first answer is the real one.
      let status = 0;
      while (status === 0) {
        status = await new Promise<number>((done) => {
          const asked = request(
            { host: "127.0.0.1", port, path: "/healthz/ready?wait_ms=5000", agent: false },
            (res) => done(res.statusCode ?? -1),
          );
          asked.on("error", () => setImmediate(() => done(0)));
          asked.end();
        });
      }
      expect(status).toBe(200);
      expect(lc.events.map((e) => e.event)).toContain("ready");
    } finally {
      await lc.stop();
    }
  });
});
