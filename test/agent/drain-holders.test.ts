// What a drain waits for: its holders named in `drain_waiting`, `/v1/state` and `lastcall status`,
// with a real Envoy and filter.
import { spawn } from "node:child_process";
import { request } from "node:http";
import { afterEach, describe, expect, it } from "vitest";
import { http1, outcomeOf } from "../filter/clients.ts";
import { inboundConfig, lastcallCommand, startLastcall } from "../support/lastcall.ts";
import { agentSees, agentState, upstreamForFile } from "../support/serving.ts";
import { slowDownload } from "../support/slow-reader.ts";

const app = upstreamForFile();
let stopApp: (() => void) | undefined;
afterEach(() => stopApp?.());

/** Two inbound listeners in front of the app: `inbound` and `inbound_b`. */
function twoListeners(): Record<string, unknown> {
  const a = inboundConfig({ upstreamPort: app.port, listener: "inbound" }) as {
    static_resources: { listeners: unknown[] };
  };
  const b = inboundConfig({ upstreamPort: app.port, listener: "inbound_b" }) as {
    static_resources: { listeners: unknown[] };
  };
  a.static_resources.listeners.push(...b.static_resources.listeners);
  return a;
}

function post(port: number, path: string) {
  const req = request({
    host: "127.0.0.1",
    port,
    path,
    method: "POST",
    agent: false,
    headers: { "content-length": "2" },
  });
  const outcome = outcomeOf(req);
  req.end("{}");
  return outcome;
}

interface Holder {
  epoch: number;
  listener: string;
  method?: string;
  path?: string;
  age_ms?: number;
  protocol?: string;
  cluster?: string;
}

describe("what holds a drain (default settings)", () => {
  it("three requests on two listeners and a wrapped app: named oldest first (listener, protocol, cluster; no method nor path) in drain_waiting, /v1/state and lastcall status; the ones that end go", async () => {
    const lc = startLastcall(twoListeners());
    await lc.event("ready");
    const status = await lc.statusUrl();
    const [portA, portB] = [await lc.listenerPort("inbound"), await lc.listenerPort("inbound_b")];
    // The wrapped app: `lastcall exec` around a process that runs until the test ends it.
    const [command, ...prefix] = lastcallCommand();
    const exec = spawn(command, [
      ...prefix,
      "exec",
      "--status-url",
      `${status}/healthz/ready`,
      "--",
      process.execPath,
      "-e",
      "setInterval(() => {}, 1000)",
    ], { stdio: "ignore" });
    stopApp = () => exec.kill("SIGKILL");
    await lc.event("app_running");

    // Oldest first: each is held by the app before the next is sent.
    const first = http1(portA, "/hold/first?token=secret");
    await app.until((a) => a.held === 1);
    const second = post(portB, "/hold/second");
    await app.until((a) => a.held === 2);
    const third = http1(portA, "/hold/third");
    await app.until((a) => a.held === 3);
    await agentSees(status, 3);
    expect((await agentState(status)).drain).toBeUndefined(); // nothing asked outside a drain

    lc.signal("SIGTERM");
    const waiting = await lc.event("drain_waiting", (e) => (e.holders as Holder[]).length === 3);
    const holders = waiting.holders as Holder[];
    expect(holders.map((h) => [h.listener, h.protocol, h.cluster])).toEqual([
      ["inbound", "HTTP/1.1", "app"],
      ["inbound_b", "HTTP/1.1", "app"],
      ["inbound", "HTTP/1.1", "app"],
    ]);
    expect(
      holders.every((h) =>
        h.epoch === 0 && typeof h.age_ms === "number" && !("method" in h) && !("path" in h)
      ),
    ).toBe(true);
    expect(holders[0].age_ms!).toBeGreaterThanOrEqual(holders[1].age_ms!);
    expect(holders[1].age_ms!).toBeGreaterThanOrEqual(holders[2].age_ms!);
    expect(waiting).toMatchObject({
      inflight: 3,
      unnamed: 0,
      by_listener: { inbound: 2, inbound_b: 1 },
    });
    expect(waiting.apps).toEqual([{
      id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      pid: expect.any(Number),
    }]); // lastcall exec's id: a UUID
    expect(waiting.deadline_in_ms as number).toBeGreaterThan(0);

    const state = await agentState(status) as unknown as {
      drain: { source: string; holders: Holder[] };
    };
    expect(state.drain.source).toBe("SIGTERM");
    expect(state.drain.holders.map((h) => [h.listener, h.protocol, h.cluster])).toEqual(
      holders.map((h) => [h.listener, h.protocol, h.cluster]),
    );
    expect(state.drain.holders[0].age_ms!).toBeGreaterThan(holders[0].age_ms!); // ages grow
    expect(JSON.stringify(state)).not.toContain("/hold");

    const said = await runStatus(status);
    expect(said.code).toBe(0);
    const named = said.out.split("\n").filter((l) =>
      /\binbound(_b)?\s+HTTP\/1\.1 to app\b/.test(l)
    );
    expect(named.map((l) => /\b(inbound_b|inbound)\b/.exec(l)![1])).toEqual([
      "inbound",
      "inbound_b",
      "inbound",
    ]); // oldest first
    expect(said.out).not.toContain("/hold");
    expect(said.out).not.toMatch(/\b(GET|POST)\b/);

    // The oldest ends: it leaves the list.
    expect(app.releaseWhere((r) => r.url!.startsWith("/hold/first"))).toBe(1);
    expect(await first).toEqual({ status: 200, reset: false });
    const after = await lc.event("drain_waiting", (e) => (e.holders as Holder[]).length === 2);
    expect((after.holders as Holder[]).map((h) => h.listener)).toEqual(["inbound_b", "inbound"]);
    expect(lc.output()).not.toContain("/hold");

    // The rest end, then the app: the drain ends on zero.
    app.release();
    expect([await second, await third]).toEqual([{ status: 200, reset: false }, {
      status: 200,
      reset: false,
    }]);
    exec.kill("SIGTERM");
    expect(await lc.event("terminated")).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
    });
  });

  it("a slow reader: the bytes Envoy still has to deliver are in /v1/state while the drain waits for them", async () => {
    const lc = startLastcall(inboundConfig({ upstreamPort: app.port }));
    await lc.event("ready");
    const status = await lc.statusUrl();
    // The last few MB sit in Envoy's and the kernel's buffers for a second or more at 2 MB/s.
    const size = 24_000_000;
    const download = slowDownload(await lc.listenerPort("ingress"), `/bytes?n=${size}`, 2_000_000);
    await download.reached(1_000_000);
    lc.signal("SIGTERM");
    const flushing = await lc.event("drain_flushing");
    const drain = (await agentState(status)).drain as { inflight: number; unsent_bytes?: number };
    expect(drain.inflight).toBe(0); // Envoy is done with the stream: only bytes are left
    expect(drain.unsent_bytes).toBeGreaterThan(0);
    expect(drain.unsent_bytes).toBeLessThanOrEqual(flushing.bytes as number);
    expect(await download.done).toMatchObject({
      status: 200,
      expected: size,
      received: size,
      endedBy: "fin",
    });
    expect(await lc.event("terminated")).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
      bytes_unsent_at_stop: 0,
    });
  });

  it("--holder-paths: the method and path of each request (never its query string) in drain_waiting, /v1/state and lastcall status", async () => {
    const lc = startLastcall(inboundConfig({ upstreamPort: app.port }), {
      args: ["--holder-paths"],
    });
    await lc.event("ready");
    const status = await lc.statusUrl();
    const port = await lc.listenerPort("ingress");
    const first = http1(port, "/hold/private?token=secret");
    await app.until((a) => a.held === 1);
    const second = post(port, "/hold/second?q=hidden");
    await app.until((a) => a.held === 2);
    await agentSees(status, 2);
    lc.signal("SIGTERM");
    const waiting = await lc.event("drain_waiting", (e) => (e.holders as Holder[]).length === 2);
    expect(
      (waiting.holders as Holder[]).map((
        h,
      ) => [h.listener, h.method, h.path, h.protocol, h.cluster]),
    ).toEqual([
      ["ingress", "GET", "/hold/private", "HTTP/1.1", "app"],
      ["ingress", "POST", "/hold/second", "HTTP/1.1", "app"],
    ]);
    const state = await agentState(status) as unknown as { drain: { holders: Holder[] } };
    expect(state.drain.holders.map((h) => [h.method, h.path])).toEqual([["GET", "/hold/private"], [
      "POST",
      "/hold/second",
    ]]);
    const said = await runStatus(status);
    expect(said.code).toBe(0);
    const lines = said.out.split("\n");
    const at = (text: string) => lines.findIndex((l) => l.includes(text));
    expect(at("GET /hold/private")).toBeGreaterThan(-1);
    expect(at("GET /hold/private")).toBeLessThan(at("POST /hold/second")); // oldest first
    expect(said.out).toMatch(/ingress\s+POST \/hold\/second/);
    for (const text of [said.out, JSON.stringify(state), lc.output()]) {
      expect(text).not.toMatch(/secret|hidden|token=|q=/);
    }
    app.release();
    expect([await first, await second]).toEqual([{ status: 200, reset: false }, {
      status: 200,
      reset: false,
    }]);
    expect(await lc.event("terminated")).toMatchObject({ reason: "inflight_zero" });
  });
});

/** Runs `lastcall status` against a running lastcall. */
function runStatus(status: string): Promise<{ code: number | null; out: string }> {
  const [command, ...prefix] = lastcallCommand();
  const child = spawn(command, [...prefix, "status", "--status-url", status], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout!.on("data", (chunk) => (out += chunk));
  child.stderr!.on("data", (chunk) => (out += chunk));
  return new Promise((done) => child.once("exit", (code) => done({ code, out })));
}
