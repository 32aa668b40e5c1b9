// The status server on 0.0.0.0 on a real socket: a caller inside the pod (loopback) can stop or
// drain it.
import { request } from "node:http";
import { afterEach, describe, expect, it, vi } from "vitest";
import {
  createStatusApp,
  REPORT_MAX_BYTES,
  type StatusControls,
} from "../../agent/status/routes.ts";
import { listen, type StatusServer } from "../../agent/status/listen.ts";
import { connectionMaker } from "../../agent/status/not-through-envoy.ts";

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

let server: StatusServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

async function serve(envoyPids: number[] = []) {
  const controls = fakeControls(envoyPids);
  server = await listen(createStatusApp(controls), "0.0.0.0", 0);
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

  it.each([["content-length", false], ["chunked", true]])(
    "over 16 KiB with %s: 413",
    async (_name, chunked) => {
      const { controls } = await serve();
      expect(await post(server!.port, REPORT_MAX_BYTES + 1, chunked as boolean)).toBe(413);
      expect(controls.report).not.toHaveBeenCalled();
    },
  );
});

describe("held until warmed (the agent's, until its first Envoy is spawned)", () => {
  it("a request that came before warm() waits and is answered once warmed", async () => {
    const controls = fakeControls();
    server = await listen(createStatusApp(controls), "127.0.0.1", 0, { held: true });
    let answered = false;
    const early = fetch(`http://127.0.0.1:${server.port}/healthz/ready`).then((res) => {
      answered = true;
      return res.status;
    });
    // Nothing answers while held: a negative, so a bounded look (it passes only if held).
    await new Promise((done) => setTimeout(done, 300));
    expect(answered).toBe(false);
    expect(controls.readiness).not.toHaveBeenCalled();
    await server.warm();
    expect(await early).toBe(200);
    expect(controls.readiness).toHaveBeenCalledOnce();
  });

  it("not held (the default): the first request loads the handler itself", async () => {
    const { url } = await serve();
    expect((await fetch(`${url("127.0.0.1")}/healthz/live`)).status).toBe(200);
  });
});
