// Envoy Gateway's shutdown pair run as its pods run it (`envoy-gateway envoy …`, through a link),
// against a real Envoy with the filter.
import { existsSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { httpBootstrap } from "../support/envoy-bootstrap.ts";
import { startEnvoy, stopAllEnvoys, type TestEnvoy } from "../support/envoy.ts";
import { type HookCommand, msBetween, startHook } from "../support/hook-command.ts";
import { inboundConfig, startLastcall, stopAllLastcalls } from "../support/lastcall.ts";
import { createNetns, netnsSkipReason } from "../support/netns.ts";
import { startUpstreamApp, type UpstreamApp } from "../support/upstream-app.ts";
import { root } from "../support/paths.ts";

let app: UpstreamApp;
let envoyGateway: string;
beforeAll(async () => {
  app = await startUpstreamApp();
  // As in lastcall's image for Envoy Gateway: the executable is also found as envoy-gateway.
  envoyGateway = join(mkdtempSync(join(tmpdir(), "lastcall-eg-")), "envoy-gateway");
  symlinkSync(join(root, "dist/lastcall"), envoyGateway);
});
afterAll(() => app.close());
afterEach(async () => {
  app.release();
  await stopAllLastcalls();
  await stopAllEnvoys();
});

/** Envoy's server state: LIVE, or DRAINING once its health check was failed. */
async function envoyState(envoy: TestEnvoy): Promise<string> {
  return ((await (await fetch(`${envoy.adminUrl}/server_info`)).json()) as { state: string }).state;
}

/** The shutdown-manager as Envoy Gateway starts it, on a free port and a test's ready file. */
async function manager(
  readyFile: string,
  flags: string[] = [],
): Promise<{ hook: HookCommand; base: string }> {
  const hook = startHook([
    "envoy",
    "shutdown-manager",
    ...flags,
    "--serve-port",
    "0",
    "--ready-file",
    readyFile,
  ], { executable: envoyGateway });
  const serving = await hook.event("serving");
  return { hook, base: `http://127.0.0.1:${serving.port}` };
}

/** The preStop as Envoy Gateway writes it (`--flag=value`), plus where this test's Envoy and ready file are. */
function shutdown(envoy: TestEnvoy, readyFile: string, flags: string[]): HookCommand {
  const admin = new URL(envoy.adminUrl).host;
  return startHook([
    "envoy",
    "shutdown",
    ...flags,
    `--admin-address=${admin}`,
    `--ready-file=${readyFile}`,
    "--status-url=",
  ], { executable: envoyGateway });
}

describe("Envoy Gateway's pair, as envoy-gateway", () => {
  it("default drain: health check failed at once; /shutdown/ready answers only after the minimum and the last request", async () => {
    const envoy = await startEnvoy(httpBootstrap({ upstreamPort: app.port }));
    const readyFile = join(mkdtempSync(join(tmpdir(), "lastcall-eg-")), "shutdown-ready");
    const { base } = await manager(readyFile, ["--ready-timeout=70s"]);
    const health = await fetch(`${base}/healthz`);
    expect([health.status, await health.text()]).toEqual([200, ""]);

    const port = envoy.port("ingress");
    const held = [0, 1].map(() => fetch(`http://127.0.0.1:${port}/hold`).then((r) => r.status));
    await app.until((a) => a.held === 2);
    let answered = false;
    const preStop = fetch(`${base}/shutdown/ready`).then(async (r) => {
      answered = true;
      return [r.status, await r.text()];
    });

    const hook = shutdown(envoy, readyFile, ["--drain-timeout=60s", "--min-drain-duration=1s"]);
    const begin = await hook.event("drain_begin");
    expect(begin).toMatchObject({ min_drain_ms: 1000, timeout_ms: 60_000, exit_at: 0 });
    await hook.event("healthcheck_failed");
    expect(await envoyState(envoy)).toBe("DRAINING");
    expect(hook.events.map((e) => e.event).slice(0, 2)).toEqual([
      "drain_begin",
      "healthcheck_failed",
    ]);
    // Requests in flight, counted by the filter; the minimum drain has not passed.
    const counted = await hook.event("open_count");
    expect(counted).toMatchObject({ what: "inflight_requests", count: 2, exit_at: 0 });
    const minimum = await hook.event("min_drain_reached");
    expect(msBetween(begin, minimum)).toBeGreaterThan(1000);
    expect(existsSync(readyFile)).toBe(false);
    expect(answered).toBe(false);

    app.release(1);
    await app.until((a) => a.held === 1);
    app.release();
    expect(await Promise.all(held)).toEqual([200, 200]);
    const drained = await hook.event("drained");
    expect(drained).toMatchObject({ reason: "count", ready_file: readyFile });
    expect(await hook.exited).toEqual({ code: 0, signal: null });
    expect(await preStop).toEqual([200, ""]);
    expect(hook.events.filter((e) => e.event === "open_count").at(-1)).toMatchObject({ count: 0 });
  });

  it("--health-check-failure-delay=2s: listeners drain at once, the health check fails only after the delay", async () => {
    // Envoy Gateway starts Envoy with --drain-strategy immediate: a draining listener closes every connection it answers.
    const envoy = await startEnvoy(httpBootstrap({ upstreamPort: app.port }), {
      args: ["--drain-strategy", "immediate"],
    });
    const readyFile = join(mkdtempSync(join(tmpdir(), "lastcall-eg-")), "shutdown-ready");
    // As in Envoy Gateway, a drain may end before a delay longer than its minimum: the minimum here is past the delay.
    const hook = shutdown(envoy, readyFile, [
      "--health-check-failure-delay=2s",
      "--drain-timeout=60s",
      "--min-drain-duration=3s",
    ]);
    const begin = await hook.event("drain_begin");
    await hook.event("listeners_draining");
    expect((await hook.event("healthcheck_fail_delayed")).ms).toBe(2000);
    // Draining listeners, health check still passing: Envoy is LIVE, a new request is told to close.
    expect(await envoyState(envoy)).toBe("LIVE");
    const during = await fetch(`http://127.0.0.1:${envoy.port("ingress")}/`);
    expect(during.headers.get("connection")).toBe("close");
    await during.text();
    const failed = await hook.event("healthcheck_failed");
    expect(msBetween(begin, failed)).toBeGreaterThanOrEqual(2000);
    expect(await envoyState(envoy)).toBe("DRAINING");
    expect(await hook.event("drained")).toMatchObject({ reason: "count" });
    expect(hook.events.map((e) => e.event).slice(0, 4)).toEqual([
      "drain_begin",
      "listeners_draining",
      "healthcheck_fail_delayed",
      "open_count",
    ]);
  });

  it("--exit-at-connections=1 ends with one still in flight; --drain-timeout=2s ends whatever is open", async () => {
    const envoy = await startEnvoy(httpBootstrap({ upstreamPort: app.port }));
    const dir = mkdtempSync(join(tmpdir(), "lastcall-eg-"));
    const port = envoy.port("ingress");
    const held = [0, 1].map(() =>
      fetch(`http://127.0.0.1:${port}/hold`).then((r) => r.status, () => 0)
    );
    await app.until((a) => a.held === 2);
    const atOne = shutdown(envoy, join(dir, "one"), [
      "--min-drain-duration=0s",
      "--exit-at-connections=1",
      "--check-interval=100ms",
    ]);
    expect((await atOne.event("open_count")).count).toBe(2);
    expect(existsSync(join(dir, "one"))).toBe(false);
    app.release(1);
    expect(await atOne.event("drained")).toMatchObject({ reason: "count" });
    expect(atOne.events.filter((e) => e.event === "open_count").at(-1)).toMatchObject({ count: 1 });

    const timeout = shutdown(envoy, join(dir, "timeout"), [
      "--drain-timeout=2s",
      "--min-drain-duration=1s",
      "--check-interval=100ms",
    ]);
    const begin = await timeout.event("drain_begin");
    const drained = await timeout.event("drained");
    expect(drained).toMatchObject({ reason: "timeout" });
    expect(msBetween(begin, drained)).toBeGreaterThan(2000);
    expect(timeout.events.filter((e) => e.event === "open_count").at(-1)).toMatchObject({
      count: 1,
    });
    expect(existsSync(join(dir, "timeout"))).toBe(true);
    app.release();
    await Promise.all(held);
  });

  it("with lastcall run as the Envoy container: its drain starts with the hook's, counted by the filter (lastcall run on its defaults)", async () => {
    const lc = startLastcall(inboundConfig({ upstreamPort: app.port }));
    await lc.event("ready");
    const status = await lc.statusUrl();
    const readyFile = join(mkdtempSync(join(tmpdir(), "lastcall-eg-")), "shutdown-ready");
    const held = fetch(`http://127.0.0.1:${await lc.listenerPort("ingress")}/hold`).then((r) =>
      r.status
    );
    await app.until((a) => a.held === 1);
    const hook = startHook([
      "envoy",
      "shutdown",
      "--drain-timeout=60s",
      "--min-drain-duration=1s",
      `--admin-address=${new URL(lc.adminUrl()).host}`,
      `--ready-file=${readyFile}`,
      `--status-url=${status}`,
    ], { executable: envoyGateway });
    expect(await hook.event("agent_drain")).toMatchObject({ url: `${status}/drain`, status: 200 });
    expect(await lc.event("drain_start")).toMatchObject({ source: "POST /drain" });
    expect(await hook.event("open_count")).toMatchObject({ what: "inflight_requests", count: 1 });
    await hook.event("min_drain_reached");
    expect(existsSync(readyFile)).toBe(false);
    app.release();
    expect(await held).toBe(200);
    expect(await hook.event("drained")).toMatchObject({ reason: "count" });
    // The kubelet's SIGTERM after the hooks: the drain that began with the hook ends on the confirmed zero.
    lc.signal("SIGTERM");
    expect(await lc.event("terminated")).toMatchObject({ inflight_at_stop: 0 });
    expect(lc.events.filter((e) => e.event === "drain_start")).toHaveLength(1);
  });

  it("/shutdown/ready answers 500 after --ready-timeout when no drain finished", async () => {
    const readyFile = join(mkdtempSync(join(tmpdir(), "lastcall-eg-")), "shutdown-ready");
    const { hook, base } = await manager(readyFile, ["--ready-timeout=1s"]);
    const started = Date.now();
    const response = await fetch(`${base}/shutdown/ready`);
    expect(response.status).toBe(500);
    expect(Date.now() - started).toBeGreaterThanOrEqual(1000);
    expect(await hook.event("shutdown_ready_timeout")).toMatchObject({ timeout_ms: 1000 });
    hook.child.kill("SIGTERM");
    expect(await hook.exited).toEqual({ code: 0, signal: null });
  });

  it("lastcall gateway … is the same pair; lastcall envoy … is not a command", async () => {
    const help = startHook(["gateway", "shutdown", "--help"]);
    expect(await help.exited).toEqual({ code: 0, signal: null });
    const unknown = startHook(["envoy", "shutdown"]);
    expect(await unknown.exited).toEqual({ code: 2, signal: null });
    expect(unknown.stderr()).toContain("unknown command 'envoy'");
  });
});

const noNetns = netnsSkipReason();
describe("Envoy Gateway's fixed names on their defaults", () => {
  it.skipIf(noNetns)(
    `${
      noNetns ? `needs a network namespace: ${noNetns}` : "in a network namespace of its own"
    }: admin localhost:19000, :19002/healthz and /shutdown/ready, /tmp/shutdown-ready, minimum drain 10 s`,
    async () => {
      const readyFile = "/tmp/shutdown-ready";
      expect(existsSync(readyFile), `${readyFile} is left from something else: remove it`).toBe(
        false,
      );
      const ns = createNetns();
      const dir = mkdtempSync(join(tmpdir(), "lastcall-eg-"));
      const config = join(dir, "envoy.json");
      // Envoy Gateway's bootstrap puts admin on 127.0.0.1:19000; a direct answer stands in for the routes.
      writeFileSync(
        config,
        JSON.stringify({
          admin: { address: { socket_address: { address: "127.0.0.1", port_value: 19000 } } },
          static_resources: {
            listeners: [{
              name: "eg-10080",
              address: { socket_address: { address: "0.0.0.0", port_value: 10080 } },
              filter_chains: [{
                filters: [{
                  name: "envoy.filters.network.http_connection_manager",
                  typed_config: {
                    "@type":
                      "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                    stat_prefix: "http-10080",
                    route_config: {
                      virtual_hosts: [{
                        name: "all",
                        domains: ["*"],
                        routes: [{
                          match: { prefix: "/" },
                          direct_response: { status: 200, body: { inline_string: "ok" } },
                        }],
                      }],
                    },
                    http_filters: [{
                      name: "envoy.filters.http.router",
                      typed_config: {
                        "@type":
                          "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router",
                      },
                    }],
                  },
                }],
              }],
            }],
          },
        }),
      );
      const envoy = ns.spawn(process.env.ENVOY_BIN!, [
        "-c",
        config,
        "--disable-hot-restart",
        "-l",
        "warning",
      ], { stdio: "ignore" });
      try {
        const curl = (url: string, extra: string[] = []) =>
          ns.run("curl", [
            "-s",
            "-w",
            " %{http_code}",
            "--retry",
            "50",
            "--retry-connrefused",
            "--retry-delay",
            "0",
            ...extra,
            url,
          ]);
        expect((await curl("http://127.0.0.1:19000/ready")).stdout).toBe("LIVE\n 200");
        const server = ns.spawn(envoyGateway, ["envoy", "shutdown-manager"], {
          stdio: ["ignore", "pipe", "pipe"],
        });
        try {
          expect(await curl("http://127.0.0.1:19002/healthz")).toMatchObject({
            code: 0,
            stdout: " 200",
          });
          const preStop = curl("http://127.0.0.1:19002/shutdown/ready");
          const started = Date.now();
          const hook = await ns.run(envoyGateway, ["envoy", "shutdown", "--status-url="]);
          expect(hook.code).toBe(0);
          const events = hook.stdout.trim().split("\n").map((line) => JSON.parse(line));
          expect(events[0]).toMatchObject({
            event: "drain_begin",
            min_drain_ms: 10_000,
            timeout_ms: 60_000,
            exit_at: 0,
          });
          expect(events.map((e) => e.event)).toContain("healthcheck_failed");
          expect(events.at(-1)).toMatchObject({
            event: "drained",
            reason: "count",
            ready_file: readyFile,
          });
          expect(Date.now() - started).toBeGreaterThan(10_000);
          expect(await preStop).toMatchObject({ code: 0, stdout: " 200" });
          expect((await curl("http://127.0.0.1:19000/server_info")).stdout).toContain(
            '"state": "DRAINING"',
          );
        } finally {
          server.kill("SIGTERM");
        }
      } finally {
        envoy.kill("SIGTERM");
        rmSync(readyFile, { force: true });
      }
    },
    40_000,
  );
});
