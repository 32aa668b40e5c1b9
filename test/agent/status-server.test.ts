// The status server bound to 0.0.0.0 (for kubelet probes) on a real socket: the peer address
// comes from the connection, so a neighbour reaching the pod's address cannot stop or drain
// the proxy, while a caller inside the pod (loopback) can.
import { networkInterfaces } from "node:os";
import { request } from "node:http";
import { afterEach, describe, expect, it, vi } from "vitest";
import { createStatusApp, type StatusControls } from "../../agent/server/app.ts";
import { listen, type StatusServer } from "../../agent/server/listen.ts";

const TOKEN = "0123456789abcdef-status-server";

function fakeControls() {
  return {
    readiness: vi.fn(async () => ({ ready: true, reason: "running" })),
    state: vi.fn(() => ({ phase: "running", epochs: [], restarts: 0, hotRestarts: 0, reloadsRejected: 0, inflight: 0, filter: "reporting" }) as ReturnType<StatusControls["state"]>),
    metrics: vi.fn(async () => ""),
    reportToken: TOKEN,
    report: vi.fn(async () => ({ draining: true, probe: 5 })),
    quit: vi.fn(),
    drain: vi.fn(),
  } satisfies StatusControls;
}

/** A non-loopback IPv4 address of this machine, if it has one. */
const external = Object.values(networkInterfaces()).flat().find((i) => i && !i.internal && i.family === "IPv4")?.address;

let server: StatusServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

async function serve() {
  const controls = fakeControls();
  server = await listen(createStatusApp(controls), "0.0.0.0", 0);
  return { controls, url: (host: string) => `http://${host}:${server!.port}` };
}

describe("bound to 0.0.0.0", () => {
  it.skipIf(!external)(`POST /quitquitquit and /drain from this machine's non-loopback address (${external}): 403, nothing done`, async () => {
    const { controls, url } = await serve();
    for (const path of ["/quitquitquit", "/drain"]) {
      const res = await fetch(`${url(external!)}${path}`, { method: "POST", headers: { "x-forwarded-for": "127.0.0.1" } });
      expect(res.status).toBe(403);
      expect(await res.json()).toEqual({ error: `POST ${path} is accepted only from loopback, not from ${external}` });
    }
    expect(controls.quit).not.toHaveBeenCalled();
    expect(controls.drain).not.toHaveBeenCalled();
    // Probes stay open to the same caller.
    expect((await fetch(`${url(external!)}/healthz/ready`)).status).toBe(200);
  });

  it("POST /quitquitquit and /drain from 127.0.0.1: 200", async () => {
    const { controls, url } = await serve();
    expect((await fetch(`${url("127.0.0.1")}/quitquitquit`, { method: "POST" })).status).toBe(200);
    expect((await fetch(`${url("127.0.0.1")}/drain`, { method: "POST" })).status).toBe(200);
    expect(controls.quit).toHaveBeenCalledOnce();
    expect(controls.drain).toHaveBeenCalledOnce();
  });

  it.skipIf(!external)("a report from a non-loopback address with the token is taken, answered in headers", async () => {
    const { controls, url } = await serve();
    const body = JSON.stringify({ instance: "a", epoch: 0, seq: 1, inflight: 0, draining: true, reason: "probe" });
    const res = await fetch(`${url(external!)}/v1/inflight`, { method: "POST", headers: { "x-lastcall-token": TOKEN }, body });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-lastcall-draining")).toBe("1");
    expect(res.headers.get("x-lastcall-probe")).toBe("5");
    expect(controls.report).toHaveBeenCalledOnce();
  });
});

describe("report bodies over a real connection", () => {
  /** Posts `size` bytes to /v1/inflight, with content-length or chunked; resolves with the status. */
  function post(port: number, size: number, chunked: boolean): Promise<number> {
    return new Promise((resolve, reject) => {
      const headers: Record<string, string | number> = { "x-lastcall-token": TOKEN, "content-type": "application/json" };
      if (!chunked) headers["content-length"] = size;
      const req = request({ host: "127.0.0.1", port, method: "POST", path: "/v1/inflight", headers }, (res) => {
        res.resume();
        resolve(res.statusCode!);
      });
      req.on("error", reject);
      const chunk = Buffer.alloc(1024, 0x20);
      for (let sent = 0; sent < size; sent += chunk.length) req.write(chunk.subarray(0, Math.min(chunk.length, size - sent)));
      req.end();
    });
  }

  it.each([["content-length", false], ["chunked", true]])("over 4 KiB with %s: 413", async (_name, chunked) => {
    const { controls } = await serve();
    expect(await post(server!.port, 8192, chunked as boolean)).toBe(413);
    expect(controls.report).not.toHaveBeenCalled();
  });
});
