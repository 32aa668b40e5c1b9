// Reloads with a real Envoy 1.40: a watched config change starts the next epoch while
// the old one drains and exits, failing no request under load; a config Envoy rejects leaves the
// old epoch serving; `--no-hot-restart` restarts cold.
import { writeFileSync } from "node:fs";
import { Agent, request } from "node:http";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import {
  freePort,
  inboundConfig,
  isAlive,
  type LastcallEvent,
  startLastcall,
  stopAllLastcalls,
  writeConfig,
} from "../support/lastcall.ts";
import { waitFor } from "../support/envoy.ts";
import { startUpstreamApp, type UpstreamApp } from "../support/upstream-app.ts";
import type { Json } from "../support/json.ts";

let app: UpstreamApp;
beforeAll(async () => (app = await startUpstreamApp()));
afterAll(() => app.close());
afterEach(stopAllLastcalls);

/**
 * The inbound config on a fixed port (a hot restart hands the parent's listen sockets to the
 * child by address, so port 0 would give the child another port), tagging responses with
 * `x-config: <version>`.
 */
function taggedConfig(port: number, version: string): Json {
  const config = inboundConfig({ upstreamPort: app.port }) as Json;
  const listener = config.static_resources.listeners[0];
  listener.address.socket_address.port_value = port;
  const hcm = listener.filter_chains[0].filters[0].typed_config;
  hcm.route_config.response_headers_to_add = [{ header: { key: "x-config", value: version } }];
  return config;
}

/** GET `path`; resolves with status and the `x-config` header, rejects on any socket error. */
function get(
  port: number,
  path: string,
  agent: Agent | false,
): Promise<{ status: number; config: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port, path, agent, timeout: 10_000 }, (response) => {
      let body = "";
      response.setEncoding("utf8").on("data", (chunk) => (body += chunk));
      response.on("end", () => {
        if (body !== "ok") {
          return reject(new Error(`Unexpected body from ${path}: ${body.slice(0, 100)}`));
        }
        resolve({ status: response.statusCode ?? 0, config: String(response.headers["x-config"]) });
      });
      response.on("error", reject);
    });
    req.on("timeout", () => req.destroy(new Error("Request timed out")));
    req.on("error", reject);
    req.end();
  });
}

interface LoadResult {
  ok: number;
  failed: number;
  errors: string[];
  /** `x-config` of the last successful response. */
  lastConfig: string;
}

/**
 * Two request loops against `port` until stopped: one reusing keep-alive connections, one
 * opening a new connection per request. Each request takes a few milliseconds upstream, so
 * requests are in flight whenever the listeners change hands.
 */
function startLoad(port: number) {
  const result: LoadResult = { ok: 0, failed: 0, errors: [], lastConfig: "" };
  let running = true;
  const keepAlive = new Agent({ keepAlive: true, maxSockets: 1 });
  const loop = async (agent: Agent | false) => {
    while (running) {
      try {
        const response = await get(port, "/delay?ms=5", agent);
        if (response.status !== 200) throw new Error(`Status ${response.status}`);
        result.ok++;
        result.lastConfig = response.config;
      } catch (error) {
        result.failed++;
        result.errors.push(
          `${agent ? "keep-alive" : "new connection"}: ${(error as Error).message}`,
        );
      }
    }
  };
  const loops = [loop(keepAlive), loop(false)];
  return {
    result,
    /** Resolves once `n` more requests have succeeded. */
    async succeeded(n: number): Promise<void> {
      const target = result.ok + n;
      while (result.ok < target) await new Promise((done) => setTimeout(done, 10));
    },
    async stop(): Promise<LoadResult> {
      running = false;
      await Promise.all(loops);
      keepAlive.destroy();
      return result;
    },
  };
}

const epochOf = (n: number) => (e: LastcallEvent) => e.epoch === n;

describe("hot restart", () => {
  it("starts the next epoch on a watched config change, drains the old one, fails 0 requests under load", async () => {
    const port = await freePort();
    const configPath = writeConfig(taggedConfig(port, "v1"));
    const lc = startLastcall(configPath, { args: ["--watch", configPath] });
    const first = await lc.event("ready");
    const load = startLoad(port);
    try {
      await load.succeeded(20);
      expect(load.result.lastConfig).toBe("v1");

      // An editor's burst: a truncated write, then the whole file, then the same again.
      const changedAt = Date.now();
      const next = JSON.stringify(taggedConfig(port, "v2"), null, 2);
      writeFileSync(configPath, next.slice(0, 40));
      writeFileSync(configPath, next);
      writeFileSync(configPath, next);

      const epoch = await lc.event("epoch", epochOf(1));
      expect(epoch.pid).not.toBe(first.pid);
      const ready = await lc.event("ready", epochOf(1));
      // The parent finishes what it had (the load's requests), then only its child may end it.
      const finished = await lc.event(
        "epoch_drained",
        (e) => (e.epochs as number[]).includes(0),
        15_000,
      );
      const swapMs = Date.now() - changedAt;
      expect(finished).toMatchObject({ reason: "inflight_zero", inflight_at_stop: 0 });
      await load.succeeded(20);
      const result = await load.stop();
      console.log(
        `hot restart under load: ${result.ok} ok, ${result.failed} failed; change → child ready ${
          Number(ready.ms)
        } ms after spawn, ` +
          `change → parent finished ${swapMs} ms`,
      );
      expect(result.errors).toEqual([]);
      expect(result.lastConfig).toBe("v2");
    } finally {
      await load.stop();
    }

    expect(lc.events.filter((e) => e.event === "reload")).toHaveLength(1); // the burst coalesced
    const state = await (await fetch(`${await lc.statusUrl()}/v1/state`)).json();
    // The finished parent stays, idle, until its child ends it (its shutdown, the next reload, or
    // --parent-shutdown): Envoy lets no one else end it.
    expect(state).toMatchObject({
      phase: "running",
      hotRestarts: 1,
      restarts: 0,
      current: { epoch: 1 },
      serving: { epoch: 1 },
      epochs: [{ epoch: 0 }, { epoch: 1 }],
    });
    const metrics = await (await fetch(`${await lc.statusUrl()}/metrics`)).text();
    expect(metrics).toMatch(/^lastcall_envoy_epoch 1$/m);
    expect(metrics).toMatch(/^lastcall_envoy_processes 2$/m);
  });

  it("rejects a config Envoy refuses and keeps the old epoch serving", async () => {
    const port = await freePort();
    const configPath = writeConfig(taggedConfig(port, "v1"));
    const lc = startLastcall(configPath, { args: ["--watch", configPath] });
    const first = await lc.event("ready");
    const status = await lc.statusUrl();

    const unknownCluster = taggedConfig(port, "v2");
    unknownCluster.static_resources.listeners[0].filter_chains[0].filters[0].typed_config
      .route_config
      .virtual_hosts[0].routes[0].route.cluster = "no_such_cluster";
    writeFileSync(configPath, JSON.stringify(unknownCluster));
    const rejected = await lc.event("reload_rejected");
    expect(rejected).toMatchObject({
      serving_epoch: 0,
      error: `Envoy rejected config ${configPath}`,
    });
    expect((rejected.details as string[]).join("\n")).toMatch(/no_such_cluster/);

    expect(await get(port, "/", false)).toEqual({ status: 200, config: "v1" });
    expect(await (await fetch(`${status}/v1/state`)).json()).toMatchObject({
      phase: "running",
      current: { epoch: 0, pid: first.pid },
      reloadsRejected: 1,
      hotRestarts: 0,
    });
    expect((await fetch(`${status}/healthz/ready`)).status).toBe(200);

    writeFileSync(configPath, "{ this is not: [json or yaml");
    const unreadable = await lc.event("reload_rejected", (e) => e !== rejected);
    expect(String(unreadable.error)).toMatch(
      new RegExp(`^Cannot read Envoy config ${configPath}: `),
    );
    expect(await get(port, "/", false)).toEqual({ status: 200, config: "v1" });

    // A good config afterwards still gets the next epoch.
    writeFileSync(configPath, JSON.stringify(taggedConfig(port, "v3")));
    await lc.event("ready", epochOf(1));
    // The parent accepts on the shared socket until the child tells it to stop listening, a
    // moment after the child is LIVE: every answer is a 200, and the new config takes over.
    await waitFor(async () => {
      const answer = await get(port, "/", false);
      expect(answer.status).toBe(200);
      return answer.config === "v3" ? true : undefined;
    }, { what: "the v3 epoch to answer" });
    expect(lc.events.some((e) => e.event === "exit" || e.event === "restart")).toBe(false);
  });

  it("takes a second reload while the first parent still drains, failing 0 requests", async () => {
    const port = await freePort();
    const lc = startLastcall(taggedConfig(port, "v1"), {});
    const first = await lc.event("ready");
    const load = startLoad(port);
    try {
      await load.succeeded(20);
      lc.signal("SIGHUP");
      const middle = await lc.event("ready", epochOf(1));
      lc.signal("SIGHUP");
      await lc.event("ready", epochOf(2));
      // Epoch 2 started only once epoch 0 had finished (Envoy ends a grandparent as the next
      // child starts); then epoch 1 finishes in turn.
      const firstDone = await lc.event(
        "epoch_drained",
        (e) => (e.epochs as number[]).includes(0),
        15_000,
      );
      const exit0 = await lc.event("epoch_exit", epochOf(0), 15_000);
      expect(exit0).toMatchObject({
        pid: first.pid,
        drain_reason: "inflight_zero",
        inflight_at_stop: 0,
      });
      expect(Date.parse(String(firstDone.ts))).toBeLessThanOrEqual(
        Date.parse(String((await lc.event("epoch", epochOf(2))).ts)),
      );
      expect(await lc.event("epoch_drained", (e) => (e.epochs as number[]).includes(1), 15_000))
        .toMatchObject({ reason: "inflight_zero" });
      await load.succeeded(20);
      const result = await load.stop();
      console.log(
        `two hot restarts in a row under load: ${result.ok} ok, ${result.failed} failed; epoch 0 ${exit0.exit}, pid ${middle.pid} finished`,
      );
      expect(result.errors).toEqual([]);
    } finally {
      await load.stop();
    }
    expect(await (await fetch(`${await lc.statusUrl()}/v1/state`)).json()).toMatchObject({
      hotRestarts: 2,
      current: { epoch: 2 },
      serving: { epoch: 2 },
    });
  });

  it("starts the next epoch on SIGHUP", async () => {
    const port = await freePort();
    const lc = startLastcall(taggedConfig(port, "v1"), {});
    await lc.event("ready");
    lc.signal("SIGHUP");
    expect(await lc.event("reload")).toMatchObject({ reason: "SIGHUP" });
    await lc.event("ready", epochOf(1));
    expect(await lc.event("epoch_drained", (e) => (e.epochs as number[]).includes(0), 15_000))
      .toMatchObject({ reason: "inflight_zero" });
    expect(await get(port, "/", false)).toEqual({ status: 200, config: "v1" });
  });
});

describe("--no-hot-restart", () => {
  it("restarts Envoy cold on a watched config change", async () => {
    const port = await freePort();
    const configPath = writeConfig(taggedConfig(port, "v1"));
    const lc = startLastcall(configPath, { args: ["--watch", configPath, "--no-hot-restart"] });
    const first = await lc.event("ready");
    expect(await get(port, "/", false)).toEqual({ status: 200, config: "v1" });

    writeFileSync(configPath, JSON.stringify(taggedConfig(port, "v2")));
    const started = await lc.event("epoch");
    expect(started).toMatchObject({ epoch: 0, generation: 2 });
    expect(started.pid).not.toBe(first.pid);
    expect(await lc.event("epoch_exit")).toMatchObject({ pid: first.pid });
    expect(isAlive(Number(first.pid))).toBe(false);
    await lc.event("ready", (e) => e.pid === started.pid);
    expect(await get(port, "/", false)).toEqual({ status: 200, config: "v2" });
    expect(lc.events.some((e) => e.event === "restart_scheduled")).toBe(false);
    expect(await (await fetch(`${await lc.statusUrl()}/v1/state`)).json()).toMatchObject({
      phase: "running",
      restarts: 0,
      current: { pid: started.pid },
    });
  });
});
