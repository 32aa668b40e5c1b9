// Every path users hit: Envoy is stopped only with nothing in flight or at the deadline, and what
// was cut is said truthfully.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { http1, type Outcome } from "../filter/clients.ts";
import { localCluster, waitFor } from "../support/envoy.ts";
import {
  freePort,
  inboundConfig,
  isAlive,
  lastcallCommand,
  type LastcallEvent,
  startLastcall,
  type TestLastcall,
  writeConfig,
} from "../support/lastcall.ts";
import {
  agentSees,
  agentState,
  heldAcrossSigterm,
  serving,
  upstreamForFile,
} from "../support/serving.ts";
import type { Json } from "../support/json.ts";

const app = upstreamForFile();

const names = (lc: TestLastcall) => lc.events.map((e) => e.event);
const time = (e: LastcallEvent) => Date.parse(e.ts);
const HCM =
  "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
const ROUTER = {
  name: "envoy.filters.http.router",
  typed_config: { "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router" },
};

/** An HTTP connection manager in front of cluster `app`. */
function hcmChain(statPrefix: string): Record<string, unknown> {
  return {
    filters: [{
      name: "envoy.filters.network.http_connection_manager",
      typed_config: {
        "@type": HCM,
        stat_prefix: statPrefix,
        route_config: {
          virtual_hosts: [{
            name: "app",
            domains: ["*"],
            routes: [{ match: { prefix: "/" }, route: { cluster: "app", timeout: "0s" } }],
          }],
        },
        http_filters: [ROUTER],
      },
    }],
  };
}

/** A bootstrap whose listeners come from the LDS file `ldsPath`, in front of cluster `app`. */
function ldsBootstrap(ldsPath: string): Record<string, unknown> {
  return {
    node: { id: "lastcall-test", cluster: "test" },
    dynamic_resources: {
      lds_config: { resource_api_version: "V3", path_config_source: { path: ldsPath } },
    },
    static_resources: { clusters: [localCluster("app", app.port)] },
  };
}

/** One request held by the app, and the agent sure of it (wrapped: an async function would await it). */
async function holdOne(port: number, status: string): Promise<{ held: Promise<Outcome> }> {
  const held = http1(port, "/hold");
  await app.until((a) => a.held === 1);
  await agentSees(status, 1);
  return { held };
}

/** Reads `lastcall_<name>` from `/metrics`. */
async function metric(status: string, name: string): Promise<number | undefined> {
  const text = await (await fetch(`${status}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.split(" ")[1]);
}

describe("on the default --min-drain", () => {
  it("waits for requests that arrive during the floor, and ends at the first confirmed zero after it", async () => {
    const { lc, port } = await serving(app.port, []); // --min-drain 5s, --grace 30s: the defaults
    lc.signal("SIGTERM");
    await lc.event("listeners_draining");
    // Endpoints take seconds to be removed: new connections keep coming, with gaps in which the
    // count touches zero, the last one well inside the floor.
    const outcomes: Outcome[] = [];
    let lastResponseAt = 0;
    for (let i = 0; i < 8; i++) {
      outcomes.push(await http1(port, "/delay?ms=250"));
      lastResponseAt = Date.now();
      await new Promise((done) => setTimeout(done, 250)); // a gap: nothing in flight
    }
    // The last one is still running when the floor passes.
    const late = http1(port, "/hold");
    await app.until((a) => a.held === 1);
    const floor = await lc.event("min_drain_wait");
    expect(names(lc)).not.toContain("drain_wait_done");
    await new Promise((done) =>
      setTimeout(done, Math.max(0, time(floor) + Number(floor.ms) - Date.now() + 200))
    );
    expect(names(lc)).not.toContain("drain_wait_done"); // past the floor, one request still in flight
    app.release();
    outcomes.push(await late);
    lastResponseAt = Date.now();

    const terminated = await lc.event("terminated");
    expect(outcomes.every((o) => o.status === 200 && !o.reset)).toBe(true);
    expect(terminated).toMatchObject({
      mode: "inflight",
      reason: "inflight_zero",
      inflight_at_stop: 0,
    });
    expect(time(await lc.event("drain_wait_done"))).toBeGreaterThanOrEqual(lastResponseAt - 5);
    expect(await lc.exited).toEqual({ code: 0, signal: null });
  });
});

describe("a reload racing a signal", () => {
  it("SIGHUP then SIGTERM 30 ms later: the serving Envoy is drained, the held request finishes", async () => {
    const { lc, port, status, envoyPid } = await serving(app.port, ["--min-drain", "0s"]);
    const { held } = await holdOne(port, status);
    lc.signal("SIGHUP");
    await new Promise((done) => setTimeout(done, 30));
    lc.signal("SIGTERM");
    await lc.event("terminate");
    expect(isAlive(envoyPid)).toBe(true);
    app.release();
    expect(await held).toEqual({ status: 200, reset: false });
    const terminated = await lc.event("terminated");
    expect(terminated).toMatchObject({ reason: "inflight_zero", inflight_at_stop: 0 });
    expect(await lc.exited).toEqual({ code: 0, signal: null });
  });

  it("SIGTERM right after the hot-restart child started: the parent is drained by its filter, then both stop", async () => {
    const { lc, port, status } = await serving(app.port, ["--min-drain", "0s"]);
    const { held } = await holdOne(port, status);
    lc.signal("SIGHUP");
    await lc.event("epoch", (e) => e.epoch === 1);
    lc.signal("SIGTERM");
    // Stopping a child that is not ready makes Envoy stop its parent too: it waits.
    expect(await lc.event("unready_epoch_kept")).toMatchObject({ epochs: [1] });
    expect(names(lc)).not.toContain("drain_wait_done");
    app.release();
    expect(await held).toEqual({ status: 200, reset: false });
    expect(await lc.event("terminated")).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
    });
    expect(await lc.exited).toEqual({ code: 0, signal: null });
  });

  it("a reload whose Envoy stays INITIALIZING: readiness follows the parent, SIGTERM is acted on and exits before the grace", async () => {
    const { lc, port, status } = await serving(app.port, ["--min-drain", "0s", "--grace", "5s"]);
    // The new config waits for an EDS server that never answers: Envoy stays INITIALIZING.
    const config = JSON.parse(readFileSync(lc.configPath, "utf8"));
    config.node = { id: "lastcall-test", cluster: "test" };
    config.static_resources.clusters.push({
      ...localCluster("xds", 1, { http2: true }),
      connect_timeout: "0.25s",
    });
    config.static_resources.clusters.push({
      name: "eds",
      type: "EDS",
      connect_timeout: "1s",
      eds_cluster_config: {
        eds_config: {
          resource_api_version: "V3",
          api_config_source: {
            api_type: "GRPC",
            transport_api_version: "V3",
            grpc_services: [{ envoy_grpc: { cluster_name: "xds" } }],
          },
        },
      },
    });
    writeFileSync(lc.configPath, JSON.stringify(config));
    lc.signal("SIGHUP");
    await lc.event("epoch", (e) => e.epoch === 1);
    // The parent still serves: ready, and requests pass.
    expect((await fetch(`${status}/healthz/ready`)).status).toBe(200);
    expect(await http1(port, "/")).toEqual({ status: 200, reset: false });
    const { held } = await holdOne(port, status);
    lc.signal("SIGTERM");
    const terminate = await lc.event("terminate");
    expect(await lc.event("unready_epoch_kept")).toMatchObject({ epochs: [1] });
    app.release();
    expect(await held).toEqual({ status: 200, reset: false });
    const terminated = await lc.event("terminated");
    expect(terminated).toMatchObject({ reason: "inflight_zero", inflight_at_stop: 0 });
    expect(time(terminated) - time(terminate)).toBeLessThan(5000);
    expect(await lc.exited).toEqual({ code: 0, signal: null });
  });

  it("POST /quitquitquit during a reload that waits on an INITIALIZING Envoy is acted on too", async () => {
    const config = inboundConfig({ upstreamPort: app.port }) as {
      static_resources: { clusters: unknown[] };
    } & Record<string, unknown>;
    config.node = { id: "lastcall-test", cluster: "test" };
    config.static_resources.clusters.push({
      ...localCluster("xds", 1, { http2: true }),
      connect_timeout: "0.25s",
    });
    config.static_resources.clusters.push({
      name: "eds",
      type: "EDS",
      connect_timeout: "1s",
      eds_cluster_config: {
        eds_config: {
          resource_api_version: "V3",
          api_config_source: {
            api_type: "GRPC",
            transport_api_version: "V3",
            grpc_services: [{ envoy_grpc: { cluster_name: "xds" } }],
          },
        },
      },
    });
    const lc = startLastcall(config, { args: ["--grace", "8s"] });
    await lc.event("start");
    const status = await lc.statusUrl();
    lc.signal("SIGHUP"); // waits for epoch 0, which never becomes ready
    await lc.event("reload_waiting");
    expect((await fetch(`${status}/quitquitquit`, { method: "POST" })).status).toBe(200);
    const terminated = await lc.event("terminated");
    expect(terminated).toMatchObject({ reason: "envoy_not_ready", inflight_at_stop: 0 });
    expect(await lc.exited).toEqual({ code: 0, signal: null });
  });
});

describe("a signal before Envoy serves", () => {
  it("SIGTERM while the first config is still being validated: acted on at once, terminated logged", async () => {
    // An Envoy whose `--mode validate` takes 20 s: lastcall is still validating when told to stop.
    const dir = mkdtempSync(join(tmpdir(), "lastcall-slow-"));
    const slowEnvoy = join(dir, "envoy");
    writeFileSync(
      slowEnvoy,
      `#!/bin/sh\ncase "$*" in *"--mode validate"*) sleep 20;; esac\nexec "${process.env.ENVOY_BIN}" "$@"\n`,
      { mode: 0o755 },
    );
    const statusPort = await freePort();
    const lc = startLastcall(inboundConfig({ upstreamPort: app.port }), {
      args: ["--envoy", slowEnvoy, "--status-port", String(statusPort)],
    });
    await waitFor(
      async () => ((await fetch(`http://127.0.0.1:${statusPort}/healthz/live`).catch(() =>
          undefined
        ))?.ok
        ? true
        : undefined),
      { what: "the status server" },
    );
    lc.signal("SIGTERM");
    const terminated = await lc.event("terminated");
    expect(terminated).toMatchObject({ reason: "envoy_not_running", inflight_at_stop: 0 });
    expect(time(terminated) - time(await lc.event("terminate"))).toBeLessThan(1000);
    expect(names(lc)).not.toContain("start");
    expect(await lc.exited).toEqual({ code: 0, signal: null });
  });
});

describe("listeners beyond the static ones", () => {
  it("a listener with only a default_filter_chain gets the filter and is counted", async () => {
    const config = inboundConfig({ upstreamPort: app.port }) as {
      static_resources: { listeners: Array<Record<string, unknown>> };
    };
    const listener = config.static_resources.listeners[0];
    listener.default_filter_chain = hcmChain("ingress");
    delete listener.filter_chains;
    const { lc, port, status } = await serving(app.port, ["--min-drain", "0s"], { config });
    expect(await lc.event("start")).toMatchObject({ filter: ["ingress"] });
    await heldAcrossSigterm(app, lc, port, status);
  });

  it("an LDS listener from a file gets the filter through lastcall's rewritten copy", async () => {
    const dir = mkdtempSync(join(tmpdir(), "lastcall-lds-"));
    const ldsPath = join(dir, "lds.json");
    writeFileSync(
      ldsPath,
      JSON.stringify({
        resources: [{
          "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
          name: "ingress",
          traffic_direction: "INBOUND",
          address: { socket_address: { address: "127.0.0.1", port_value: 0 } },
          filter_chains: [hcmChain("lds_ingress")],
        }],
      }),
    );
    const config = ldsBootstrap(ldsPath);
    const { lc, port, status } = await serving(app.port, ["--min-drain", "0s"], {
      config: writeConfig(config, dir),
    });
    await heldAcrossSigterm(app, lc, port, status);
    expect(names(lc)).not.toContain("drain_fallback");
  });

  it("a listener source lastcall cannot relay (a .pb_text file) is counted by Envoy's stats, every connection manager, and said so", async () => {
    const dir = mkdtempSync(join(tmpdir(), "lastcall-lds-"));
    const ldsPath = join(dir, "lds.pb_text");
    // The same listener in protobuf text format, which lastcall does not rewrite.
    writeFileSync(
      ldsPath,
      `resources {
  [type.googleapis.com/envoy.config.listener.v3.Listener] {
    name: "ingress"
    traffic_direction: INBOUND
    address { socket_address { address: "127.0.0.1" port_value: 0 } }
    filter_chains { filters { name: "envoy.filters.network.http_connection_manager" typed_config {
      [type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager] {
        stat_prefix: "lds_ingress"
        route_config { virtual_hosts { name: "app" domains: "*" routes { match { prefix: "/" } route { cluster: "app" timeout { } } } } }
        http_filters { name: "envoy.filters.http.router" typed_config { [type.googleapis.com/envoy.extensions.filters.http.router.v3.Router] { } } }
      } } } }
  }
}
`,
    );
    const config = ldsBootstrap(ldsPath);
    const { lc, port } = await serving(app.port, ["--min-drain", "0s"], {
      config: writeConfig(config, dir),
      filter: false,
    });
    const start = await lc.event("start");
    expect(start.counted_by_stats).toEqual([expect.stringMatching(/^LDS file .*lds\.pb_text/)]);
    const held = http1(port, "/hold");
    await app.until((a) => a.held === 1);
    lc.signal("SIGTERM");
    expect(await lc.event("drain_start")).toMatchObject({
      counted_by_stats: start.counted_by_stats,
    });
    await lc.event("drain_fallback");
    await new Promise((done) => setTimeout(done, 600)); // three polls of the stats: still held
    expect(names(lc)).not.toContain("drain_wait_done");
    app.release();
    expect(await held).toEqual({ status: 200, reset: false });
    expect(await lc.event("terminated")).toMatchObject({
      reason: "requests_zero_fallback",
      inflight_at_stop: 0,
    });
  });
});

describe("a hostile neighbour on the status port", () => {
  it("a forged zero report is refused and changes nothing", async () => {
    const { lc, port, status } = await serving(app.port, ["--min-drain", "0s"]);
    const { held } = await holdOne(port, status);
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
    const { held } = await holdOne(port, status);
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
    const { held } = await holdOne(port, status);
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
    const { held } = await holdOne(port, status);
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

  it("a cold reload (--no-hot-restart) drains the old Envoy before stopping it", async () => {
    const { lc, port, status, envoyPid } = await serving(app.port, ["--no-hot-restart"]);
    const { held } = await holdOne(port, status);
    lc.signal("SIGHUP");
    await lc.event("reload");
    await new Promise((done) => setTimeout(done, 1500));
    expect(isAlive(envoyPid)).toBe(true); // still draining its held request
    app.release();
    expect(await held).toEqual({ status: 200, reset: false });
    expect(await lc.event("epoch_drained")).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
    });
    await lc.event("ready", (e) => e.pid !== envoyPid);
  });
});
