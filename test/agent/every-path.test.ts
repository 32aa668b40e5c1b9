// Every path users hit: Envoy is stopped only with nothing in flight or at the deadline, and what
// was cut is said truthfully. Listener kinds: every-listener.test.ts; faults: every-fault.test.ts.
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { http1, type Outcome } from "../filter/clients.ts";
import { localCluster } from "../support/envoy-bootstrap.ts";
import { waitFor } from "../support/envoy.ts";
import {
  freePort,
  inboundConfig,
  isAlive,
  type LastcallEvent,
  startLastcall,
  type TestLastcall,
} from "../support/lastcall.ts";
import { holdOne, serving, upstreamForFile } from "../support/serving.ts";

const app = upstreamForFile();

const names = (lc: TestLastcall) => lc.events.map((e) => e.event);
const time = (e: LastcallEvent) => Date.parse(e.ts);

describe("on the default --min-drain", () => {
  it("waits for requests that arrive during the floor, and ends at the first confirmed zero after it", async () => {
    const { lc, port } = await serving(app.port, []); // --min-drain 5s, --grace 30s: the defaults
    lc.signal("SIGTERM");
    const start = await lc.event("drain_start");
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
    expect(names(lc)).not.toContain("drain_wait_done");
    // The floor ends min_drain_ms after drain_start (the filters push nothing before it, so a zero
    // in a gap is seen only if a heartbeat falls there: min_drain_wait may or may not be said).
    await new Promise((done) =>
      setTimeout(done, Math.max(0, time(start) + Number(start.min_drain_ms) - Date.now() + 200))
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
    const { held } = await holdOne(app, port, status);
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
    const { held } = await holdOne(app, port, status);
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
    const { held } = await holdOne(app, port, status);
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
