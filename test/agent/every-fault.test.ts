// Faults around a drain: a hostile neighbour on the status port, a log reader that goes away, a
// hung or busy Envoy, an Envoy that crashes or is reloaded while draining. Nothing held is cut.
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { http1 } from "../filter/clients.ts";
import { waitFor } from "../support/envoy.ts";
import {
  freePort,
  inboundConfig,
  isAlive,
  lastcallCommand,
  type LastcallEvent,
  runLastcall,
  type TestLastcall,
  writeConfig,
} from "../support/lastcall.ts";
import { agentState, holdOne, serving, upstreamForFile } from "../support/serving.ts";
import type { Json } from "../support/json.ts";

const app = upstreamForFile();

const names = (lc: TestLastcall) => lc.events.map((e) => e.event);
const time = (e: LastcallEvent) => Date.parse(e.ts);

/** Reads `lastcall_<name>` from `/metrics`. */
async function metric(status: string, name: string): Promise<number | undefined> {
  const text = await (await fetch(`${status}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.split(" ")[1]);
}

describe("a hostile neighbour on the status port", () => {
  it("a forged zero report is refused and changes nothing", async () => {
    const { lc, port, status } = await serving(app.port, ["--min-drain", "0s"]);
    const { held } = await holdOne(app, port, status);
    lc.signal("SIGTERM");
    await lc.event("listeners_draining");
    const { current } = await agentState(status);
    const forged = await fetch(`${status}/v1/inflight`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        instance: current!.instance,
        epoch: 0,
        inflight: 0,
        draining: true,
        reason: "probe",
        probe: 9e15,
      }),
    });
    expect(forged.status).toBe(403);
    expect(JSON.stringify(await agentState(status))).not.toMatch(/token/i);
    await new Promise((done) => setTimeout(done, 300));
    expect(names(lc)).not.toContain("drain_wait_done");
    expect((await agentState(status)).inflight).toBe(1);
    expect(await metric(status, "lastcall_filter_refused_reports_total")).toBe(1); // and the forgery is counted
    app.release();
    expect(await held).toEqual({ status: 200, reset: false });
    expect(await lc.event("terminated")).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
    });
    expect(lc.output()).not.toMatch(/"token"/);
  });

  it("huge reports are refused before they are read, and keep no memory", async () => {
    const { lc, status } = await serving(app.port, []);
    const rss = () =>
      Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${lc.pid}/status`, "utf8"))![1]) / 1024;
    const before = rss();
    const name = "x".repeat(5 * 1024 * 1024);
    for (let i = 0; i < 40; i++) {
      const answer = await fetch(`${status}/v1/inflight`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          instance: `${i}${name}`,
          epoch: 0,
          inflight: 0,
          draining: true,
          reason: "zero",
        }),
      }).catch(() => undefined);
      expect(answer === undefined || answer.status === 413 || answer.status === 403).toBe(true);
    }
    expect(rss() - before).toBeLessThan(60);
    expect((await fetch(`${status}/healthz/ready`)).status).toBe(200);
  });
});

describe("a log reader that goes away", () => {
  it("lastcall's stdout closed (EPIPE) mid-run: the drain still waits for the held request", async () => {
    const config = inboundConfig({ upstreamPort: app.port }) as {
      static_resources: { listeners: Array<Json> };
    };
    const port = await freePort();
    config.static_resources.listeners[0].address.socket_address.port_value = port;
    const [command, ...prefix] = lastcallCommand("bundle");
    const child = spawn(command, [
      ...prefix,
      "run",
      "--config",
      writeConfig(config),
      "--admin-port",
      "0",
      "--status-port",
      "0",
      "--min-drain",
      "0s",
    ], { stdio: ["ignore", "pipe", "ignore"] });
    const exited = new Promise<number | null>((done) => child.once("exit", (code) => done(code)));
    let out = "";
    await new Promise<void>((done) =>
      child.stdout!.on("data", (chunk) => ((out += chunk), out.includes('"ready"') && done()))
    );
    await waitFor(async () => ((await http1(port, "/")).status === 200 ? true : undefined), {
      what: "the listener",
    });
    child.stdout!.destroy(); // the reader is gone: every later event line fails with EPIPE
    const held = http1(port, "/hold");
    await app.until((a) => a.held === 1);
    child.kill("SIGTERM");
    await new Promise((done) => setTimeout(done, 300));
    app.release();
    expect(await held).toEqual({ status: 200, reset: false });
    expect(await exited).toBe(0);
  });
});

describe("a hung or busy Envoy", () => {
  it("a hung Envoy during a drain: lastcall still exits before --grace", async () => {
    const { lc, port, status, envoyPid } = await serving(app.port, [
      "--min-drain",
      "0s",
      "--grace",
      "4s",
    ]);
    const { held } = await holdOne(app, port, status);
    lc.signal("SIGTERM");
    const terminate = await lc.event("terminate");
    await lc.event("listeners_draining");
    process.kill(envoyPid, "SIGSTOP");
    const exit = await lc.exited;
    const exitedAt = Date.now();
    expect(exit).toEqual({ code: 0, signal: null });
    expect(await lc.event("terminated")).toMatchObject({ reason: "deadline" });
    expect(exitedAt - time(terminate)).toBeLessThan(4000);
    expect(isAlive(envoyPid)).toBe(false);
    expect((await held).reset).toBe(true);
  });

  it("drain_listeners that times out at drain start is asked again until Envoy answers", async () => {
    const { lc, port, status, envoyPid } = await serving(app.port, [
      "--min-drain",
      "0s",
      "--grace",
      "20s",
    ]);
    const { held } = await holdOne(app, port, status);
    process.kill(envoyPid, "SIGSTOP");
    lc.signal("SIGTERM");
    await lc.event("admin_call_failed", (e) => e.call === "drain_listeners");
    process.kill(envoyPid, "SIGCONT");
    await lc.event("listeners_draining");
    app.release();
    expect(await held).toEqual({ status: 200, reset: false });
    const terminated = await lc.event("terminated");
    expect(terminated).toMatchObject({ reason: "inflight_zero", inflight_at_stop: 0 });
  });

  it("a hung Envoy with no signal is an event, fails readiness, and recovers", async () => {
    const { lc, status, envoyPid } = await serving(app.port, []);
    expect(await metric(status, "lastcall_ready")).toBe(1);
    process.kill(envoyPid, "SIGSTOP");
    try {
      expect(await lc.event("envoy_unresponsive")).toMatchObject({ pid: envoyPid });
      const ready = await fetch(`${status}/healthz/ready`);
      expect(ready.status).toBe(503);
      expect((await ready.json() as { reason: string }).reason).toMatch(/not answering/);
      expect(await metric(status, "lastcall_ready")).toBe(0);
      // `lastcall status` says it too, with how long (from /v1/state's unresponsiveSince).
      const said = await runLastcall(["status", "--status-url", status]);
      expect(said.stdout).toMatch(/^ {2}admin not answering for \d+(\.\d)? m?s$/m);
    } finally {
      process.kill(envoyPid, "SIGCONT");
    }
    await lc.event("envoy_responsive");
    expect((await fetch(`${status}/healthz/ready`)).status).toBe(200);
  });
});

describe("drains that survive what Envoy does", () => {
  it("POST /drain then an Envoy crash: the restarted Envoy is drained too, and SIGTERM still waits", async () => {
    const { lc, status, envoyPid } = await serving(app.port, ["--min-drain", "0s"]);
    expect((await fetch(`${status}/drain`, { method: "POST" })).status).toBe(200);
    await lc.event("listeners_draining");
    process.kill(envoyPid, "SIGKILL");
    const restarted = await lc.event("ready", (e) => e.pid !== envoyPid);
    await waitFor(
      () => (lc.events.filter((e) => e.event === "listeners_draining").length === 2
        ? true
        : undefined),
      { what: "the restarted Envoy's drain" },
    );
    const port = await lc.listenerPort("ingress");
    await waitFor(
      async () => ((await agentState(status)).filter === "reporting" ? true : undefined),
      { what: "the new filter's report" },
    );
    const { held } = await holdOne(app, port, status);
    lc.signal("SIGTERM");
    await lc.event("terminate");
    await new Promise((done) => setTimeout(done, 300));
    expect(names(lc)).not.toContain("terminated");
    app.release();
    expect(await held).toMatchObject({ status: 200, reset: false });
    expect(await lc.event("terminated")).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
    });
    expect(isAlive(Number(restarted.pid))).toBe(false);
  });

  it("a reload's old Envoy killed while it holds a request: its drain says envoy_exited and the cut", async () => {
    const { lc, port, status, envoyPid } = await serving(app.port, []);
    const { held } = await holdOne(app, port, status);
    lc.signal("SIGHUP");
    await lc.event("epoch_draining");
    process.kill(envoyPid, "SIGKILL");
    const drained = await lc.event("epoch_drained");
    expect(drained).toMatchObject({
      reason: "envoy_exited",
      inflight_at_stop: 1,
      delivery_unchecked: ["epoch 0: exited before its buffers were read"],
    });
    expect(drained).not.toHaveProperty("bytes_unsent_at_stop");
    expect((await held).reset).toBe(true);
    app.release();
  });

  it("a termination during a reload's drain takes it over: no line says the cut parent drained", async () => {
    const { lc, port, status } = await serving(app.port, []);
    const { held } = await holdOne(app, port, status);
    lc.signal("SIGHUP");
    await lc.event("epoch_draining");
    lc.signal("SIGINT");
    await lc.event("listeners_draining");
    lc.signal("SIGINT");
    expect(await lc.event("terminated")).toMatchObject({
      reason: "stopped_now",
      inflight_at_stop: 1,
    });
    await lc.exited;
    expect((await held).reset).toBe(true);
    app.release();
    const parentDrained = lc.events.filter((e) =>
      e.event === "epoch_drained" || (e.event === "drain_wait_done" && e.epochs)
    );
    expect(parentDrained).toEqual([]);
  });

  it("a cold reload (--no-hot-restart) drains the old Envoy before stopping it", async () => {
    const { lc, port, status, envoyPid } = await serving(app.port, ["--no-hot-restart"]);
    const { held } = await holdOne(app, port, status);
    lc.signal("SIGHUP");
    await lc.event("reload");
    await lc.event("epoch_draining");
    // No Envoy takes new connections from its --drain-time on until the next is LIVE: not ready.
    const ready = await fetch(`${status}/healthz/ready`);
    expect(ready.status).toBe(503);
    expect((await ready.json() as { reason: string }).reason).toMatch(/cold reload/);
    await new Promise((done) => setTimeout(done, 1500));
    expect(isAlive(envoyPid)).toBe(true); // still draining its held request
    app.release();
    expect(await held).toEqual({ status: 200, reset: false });
    expect(await lc.event("epoch_drained")).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
    });
    await lc.event("ready", (e) => e.pid !== envoyPid);
    expect((await fetch(`${status}/healthz/ready`)).status).toBe(200);
  });
});
