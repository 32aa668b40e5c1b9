// Supervision with a real Envoy 1.40: start → ready, `lastcall wait`, crash restarts
// with backoff and a budget, and no orphan Envoy when lastcall itself is killed.
import { execFile } from "node:child_process";
import { createServer, type Server } from "node:net";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { localCluster } from "../support/envoy-bootstrap.ts";
import { waitFor } from "../support/envoy.ts";
import {
  freePort,
  inboundConfig,
  isAlive,
  lastcallCommand,
  startLastcall,
  stopAllLastcalls,
} from "../support/lastcall.ts";
import { startUpstreamApp, type UpstreamApp } from "../support/upstream-app.ts";
import type { Json } from "../support/json.ts";

let app: UpstreamApp;
beforeAll(async () => (app = await startUpstreamApp()));
afterAll(() => app.close());
afterEach(stopAllLastcalls);

/** Runs `lastcall <args>` to its end; never rejects on a non-zero exit. */
function lastcall(
  args: string[],
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const [command, ...prefix] = lastcallCommand();
  return new Promise((resolve) => {
    execFile(command, [...prefix, ...args], { timeout: 30_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? (error as { code?: number }).code ?? null : 0, stdout, stderr });
    });
  });
}

/**
 * A config whose Envoy never leaves INITIALIZING: a listener waits for routes from an xDS
 * server that is not there, with no initial fetch timeout. `--mode validate` accepts it.
 */
function neverReadyConfig(upstreamPort: number): Record<string, unknown> {
  const config = inboundConfig({ upstreamPort }) as {
    node?: unknown;
    static_resources: { listeners: unknown[]; clusters: unknown[] };
  };
  config.node = { id: "test", cluster: "test" };
  config.static_resources.listeners.push({
    name: "warming",
    traffic_direction: "OUTBOUND",
    address: { socket_address: { address: "127.0.0.1", port_value: 0 } },
    filter_chains: [{
      filters: [{
        name: "envoy.filters.network.http_connection_manager",
        typed_config: {
          "@type":
            "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
          stat_prefix: "warming",
          rds: {
            route_config_name: "never",
            config_source: {
              resource_api_version: "V3",
              initial_fetch_timeout: "0s",
              api_config_source: {
                api_type: "GRPC",
                transport_api_version: "V3",
                grpc_services: [{ envoy_grpc: { cluster_name: "xds" } }],
              },
            },
          },
          http_filters: [{
            name: "envoy.filters.http.router",
            typed_config: {
              "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router",
            },
          }],
        },
      }],
    }],
  });
  config.static_resources.clusters.push(localCluster("xds", 9, { http2: true }));
  return config;
}

describe("start", () => {
  it("reports ready through the event, /healthz/ready, /v1/state and /metrics", async () => {
    const lc = startLastcall(inboundConfig({ upstreamPort: app.port }));
    const ready = await lc.event("ready");
    expect(ready).toMatchObject({ epoch: 0, pid: expect.any(Number), ms: expect.any(Number) });
    const status = await lc.statusUrl();

    const probe = await fetch(`${status}/healthz/ready`);
    expect(probe.status).toBe(200);
    expect(await probe.json()).toEqual({ ready: true, reason: "LIVE" });
    const state = await (await fetch(`${status}/v1/state`)).json();
    expect(state).toMatchObject({
      phase: "running",
      current: { epoch: 0, pid: ready.pid },
      restarts: 0,
    });
    const metrics = await (await fetch(`${status}/metrics`)).text();
    expect(metrics).toMatch(/^lastcall_envoy_epoch 0$/m);
    expect(metrics).toMatch(/^lastcall_ready 1$/m);
    expect(metrics).toMatch(/^lastcall_envoy_restarts_total 0$/m);
    expect(metrics).toMatch(/^lastcall_phase\{phase="running"\} 1$/m);

    const response = await fetch(`http://127.0.0.1:${await lc.listenerPort("ingress")}/`);
    expect(response.status).toBe(200);
    await response.text();
  });
});

describe("lastcall wait", () => {
  it("exits 0 once the proxy is ready", async () => {
    const lc = startLastcall(inboundConfig({ upstreamPort: app.port }));
    const result = await lastcall([
      "wait",
      "--timeout",
      "30s",
      "--status-url",
      `${await lc.statusUrl()}/healthz/ready`,
    ]);
    expect(result).toMatchObject({ code: 0, stderr: "" });
    expect(lc.events.some((e) => e.event === "ready")).toBe(true);
  });

  it("says the status server is unreachable when nothing listens", async () => {
    const url = `http://127.0.0.1:${await freePort()}/healthz/ready`;
    const started = Date.now();
    const result = await lastcall(["wait", "--timeout", "1s", "--status-url", url]);
    expect(result.code).toBe(1);
    expect(result.stderr.trim()).toBe(
      `lastcall wait: not ready after 1s: status server unreachable at ${url} (ECONNREFUSED)`,
    );
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it("says the status server did not answer when it accepts but stays silent", async () => {
    const silent = createServer(() => {});
    await new Promise<void>((done) => silent.listen(0, "127.0.0.1", done));
    try {
      const url = `http://127.0.0.1:${(silent.address() as { port: number }).port}/healthz/ready`;
      const result = await lastcall(["wait", "--timeout", "1s", "--status-url", url]);
      expect(result.code).toBe(1);
      expect(result.stderr.trim()).toBe(
        `lastcall wait: not ready after 1s: status server at ${url} did not answer`,
      );
    } finally {
      silent.close();
    }
  });

  it("says Envoy's state when Envoy does not become ready", async () => {
    const lc = startLastcall(neverReadyConfig(app.port));
    const status = await lc.statusUrl();
    await lc.event("start");
    const result = await lastcall([
      "wait",
      "--timeout",
      "1s",
      "--status-url",
      `${status}/healthz/ready`,
    ]);
    expect(result.code).toBe(1);
    expect(result.stderr.trim()).toMatch(
      new RegExp(
        `^lastcall wait: not ready after 1s: ${status}/healthz/ready says (Envoy is INITIALIZING|Envoy epoch 0 starting: admin address not yet known)$`,
      ),
    );
    // Given the time, the reason settles on Envoy's own state.
    await waitFor(async () => {
      const probe = await fetch(`${status}/healthz/ready`);
      const body = await probe.json() as { reason: string };
      return probe.status === 503 && body.reason === "Envoy is INITIALIZING" ? true : undefined;
    }, { what: "/healthz/ready to say INITIALIZING" });
    const again = await lastcall([
      "wait",
      "--timeout",
      "1s",
      "--status-url",
      `${status}/healthz/ready`,
    ]);
    expect(again).toMatchObject({
      code: 1,
      stderr:
        `lastcall wait: not ready after 1s: ${status}/healthz/ready says Envoy is INITIALIZING\n`,
    });
  });
});

describe("crash restarts", () => {
  it("restarts a SIGKILLed Envoy with a new pid and is ready again", async () => {
    const lc = startLastcall(inboundConfig({ upstreamPort: app.port }));
    const first = await lc.event("ready");
    const killedAt = Date.now();
    process.kill(Number(first.pid), "SIGKILL");

    const scheduled = await lc.event("restart_scheduled");
    expect(scheduled).toMatchObject({ attempt: 1, last_exit: "signal SIGKILL" });
    expect(Number(scheduled.delay_ms)).toBeLessThanOrEqual(200);
    const restart = await lc.event("restart");
    expect(restart.pid).not.toBe(first.pid);
    const ready = await lc.event("ready", (e) => e.pid === restart.pid);
    const restartMs = Date.now() - killedAt;
    console.log(
      `SIGKILL of Envoy → ready again: ${restartMs} ms (backoff ${scheduled.delay_ms} ms, Envoy start ${ready.ms} ms)`,
    );

    const status = await lc.statusUrl();
    expect((await fetch(`${status}/healthz/ready`)).status).toBe(200);
    const state = await (await fetch(`${status}/v1/state`)).json();
    expect(state).toMatchObject({
      phase: "running",
      restarts: 1,
      current: { pid: restart.pid },
      lastExitReason: "Envoy exited with signal SIGKILL",
    });
    const response = await fetch(`http://127.0.0.1:${await lc.listenerPort("ingress")}/`);
    expect(response.status).toBe(200);
    await response.text();
    expect(isAlive(Number(first.pid))).toBe(false);
  });

  it("gives up after the budget when Envoy passes validation but fails at run time, naming the exit", async () => {
    // A hot-restart socket in a folder that does not exist: `--mode validate` (no hot restart)
    // passes, and every real start fails with code 1 (`unable to bind domain socket`).
    const lc = startLastcall(inboundConfig({ upstreamPort: app.port }), {
      args: ["--restart-budget", "2"],
      envoyArgs: ["--socket-path", "/nonexistent/lastcall-test-socket"],
    });

    const exit = await lc.exited;
    expect(exit.code).toBe(1);
    expect(lc.events.filter((e) => e.event === "start")).toHaveLength(1); // validated, then started
    expect(lc.events.filter((e) => e.event === "exit").map((e) => e.exit)).toEqual([
      "code 1",
      "code 1",
      "code 1",
    ]);
    expect(lc.events.filter((e) => e.event === "restart_scheduled").map((e) => e.delay_ms)).toEqual(
      [200, 400],
    );
    expect(lc.events.filter((e) => e.event === "restart")).toHaveLength(2);
    const gaveUp = lc.events.at(-1)!;
    expect(gaveUp).toMatchObject({ event: "gave_up", last_exit: "code 1" });
    expect(String(gaveUp.message)).toContain("last: code 1");
    expect(lc.output()).toMatch(
      /^lastcall: Envoy kept exiting \(last: code 1\); restart budget of 2 spent$/m,
    );
  });

  it.each(["listener", "admin"])(
    "refuses to start (exit 2) when the %s port is taken, quoting Envoy, without a crash loop",
    async (which) => {
      // A port a plain Node server holds (no SO_REUSEPORT): `--mode validate` does not bind, the
      // real Envoy fails to.
      const blocker: Server = createServer();
      await new Promise<void>((done) => blocker.listen(0, "127.0.0.1", done));
      const port = (blocker.address() as { port: number }).port;
      try {
        const config = inboundConfig({ upstreamPort: app.port }) as {
          static_resources: { listeners: Array<Json> };
        };
        if (which === "listener") {
          const listener = config.static_resources.listeners[0];
          listener.address.socket_address.port_value = port;
          listener.enable_reuse_port = false;
        }
        const lc = startLastcall(config, {
          args: which === "admin" ? ["--admin-port", String(port)] : [],
        });
        expect(await lc.exited).toEqual({ code: 2, signal: null });
        expect(lc.events.filter((e) => e.event === "start")).toHaveLength(1);
        expect(lc.events.map((e) => e.event)).not.toContain("restart_scheduled");
        const refusal = lc.output().split("\n").filter((l) => l.startsWith("lastcall: "));
        expect(refusal).toEqual([
          `lastcall: Envoy cannot listen on 127.0.0.1:${port} (is the port taken?); Envoy said: cannot bind '127.0.0.1:${port}': Address already in use`,
        ]);
      } finally {
        await new Promise((done) => blocker.close(done));
      }
    },
  );
});

describe.each([
  { name: "hot restart enabled", args: [] },
  { name: "--no-hot-restart", args: ["--no-hot-restart"] },
])("SIGKILL of lastcall ($name)", ({ args }) => {
  it("leaves no Envoy behind", async () => {
    const lc = startLastcall(inboundConfig({ upstreamPort: app.port }), { args });
    const ready = await lc.event("ready");
    const envoyPid = Number(ready.pid);
    expect(isAlive(envoyPid)).toBe(true);
    const killedAt = Date.now();
    await lc.stop("SIGKILL");
    await waitFor(() => (isAlive(envoyPid) ? undefined : true), {
      what: `Envoy ${envoyPid} to exit`,
      timeoutMs: 8000,
    });
    console.log(
      `SIGKILL of lastcall (${args.join(" ") || "hot restart"}) → Envoy gone: ${
        Date.now() - killedAt
      } ms`,
    );
  });
});
