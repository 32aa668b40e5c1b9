// Deployment hooks: `exec` makes a Job-like app complete with its status, and the
// Contour-compatible pair holds Envoy's preStop until the drain is finished.
import { execFile, spawn } from "node:child_process";
import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { promisify } from "node:util";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { httpBootstrap } from "../support/envoy-bootstrap.ts";
import { startEnvoy, stopAllEnvoys, waitFor } from "../support/envoy.ts";
import {
  inboundConfig,
  lastcallCommand,
  startLastcall,
  stopAllLastcalls,
} from "../support/lastcall.ts";
import { startUpstreamApp, type UpstreamApp } from "../support/upstream-app.ts";

const runFile = promisify(execFile);
const [lastcall, ...prefix] = lastcallCommand("bundle");
let app: UpstreamApp;
beforeAll(async () => (app = await startUpstreamApp()));
afterAll(() => app.close());
afterEach(async () => {
  app.release();
  await stopAllLastcalls();
  await stopAllEnvoys();
});

describe("lastcall exec", () => {
  it("runs a Job-like command once ready, then the agent exits and the command's status is propagated", async () => {
    const lc = startLastcall(inboundConfig({ upstreamPort: app.port }), {
      args: ["--min-drain", "0s"],
    });
    const statusUrl = await lc.statusUrl();
    await lc.event("ready");
    const port = await lc.listenerPort("ingress");
    // The job calls through Envoy, then fails with status 3.
    const job =
      `r=$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:${port}/delay?ms=1); echo "job got $r"; exit 3`;
    const exec = await runFile(lastcall, [
      ...prefix,
      "exec",
      "--status-url",
      `${statusUrl}/healthz/ready`,
      "--",
      "sh",
      "-c",
      job,
    ])
      .then(
        () => ({ code: 0, stdout: "" }),
        (error) => ({ code: error.code as number, stdout: String(error.stdout) }),
      );
    expect(exec).toEqual({ code: 3, stdout: "job got 200\n" });
    expect(await lc.exited).toEqual({ code: 0, signal: null });
    const terminate = await lc.event("terminate");
    expect(terminate.source).toBe("POST /quitquitquit");
  });

  it("does not start the app when the proxy never becomes ready, and says why", async () => {
    const result = await runFile(lastcall, [
      ...prefix,
      "exec",
      "--timeout",
      "300ms",
      "--status-url",
      "http://127.0.0.1:9/healthz/ready",
      "--",
      "sh",
      "-c",
      "echo ran",
    ])
      .then(
        () => ({ code: 0, stdout: "", stderr: "" }),
        (error) => ({
          code: error.code,
          stdout: String(error.stdout),
          stderr: String(error.stderr),
        }),
      );
    expect(result.code).toBe(1);
    expect(result.stdout).toBe("");
    expect(result.stderr).toMatch(
      /not ready after 300ms: status server unreachable at http:\/\/127\.0\.0\.1:9\/healthz\/ready/,
    );
  });
});

describe("Contour-compatible shutdown-manager and shutdown", () => {
  it("GET /shutdown returns only after the in-flight requests have finished", async () => {
    const envoy = await startEnvoy(httpBootstrap({ upstreamPort: app.port }));
    const dir = mkdtempSync(join(tmpdir(), "lastcall-contour-"));
    const readyFile = join(dir, "ok");
    const manager = spawn(lastcall, [
      ...prefix,
      "shutdown-manager",
      "--serve-port",
      "0",
      "--ready-file",
      readyFile,
    ], { stdio: ["ignore", "pipe", "inherit"] });
    try {
      const serving = await new Promise<{ port: number }>((resolve) => {
        createInterface({ input: manager.stdout! }).on("line", (line) => {
          const event = JSON.parse(line);
          if (event.event === "serving") resolve(event);
        });
      });
      expect(await (await fetch(`http://127.0.0.1:${serving.port}/healthz`)).text()).toBe("OK");

      // Two requests in flight through Envoy and the filter.
      const port = envoy.port("ingress");
      const held = [0, 1].map(() => fetch(`http://127.0.0.1:${port}/hold`).then((r) => r.text()));
      await app.until((a) => a.held === 2);

      let shutdownAnswered = false;
      const preStop = fetch(`http://127.0.0.1:${serving.port}/shutdown`).then((r) => {
        shutdownAnswered = true;
        return r.status;
      });
      const adminPort = new URL(envoy.adminUrl).port;
      // No lastcall run beside this Envoy: the port of --status-url takes no connection.
      const shutdown = runFile(lastcall, [
        ...prefix,
        "shutdown",
        "--admin-address",
        "127.0.0.1",
        "--admin-port",
        adminPort,
        "--check-interval",
        "50ms",
        "--ready-file",
        readyFile,
        "--status-url",
        "http://127.0.0.1:9",
      ]);
      // The health check is failed and the requests are still counted: nothing is written yet.
      await waitFor(
        async () => ((await envoy.stats("lastcall_inflight"))["wasmcustom.lastcall_inflight"] === 2
          ? true
          : undefined),
        { what: "gauge at 2" },
      );
      // Envoy's health check fails (state DRAINING) while the requests are still counted.
      await waitFor(
        async () => ((await (await fetch(`${envoy.adminUrl}/server_info`)).json()).state ===
            "DRAINING"
          ? true
          : undefined),
        { what: "Envoy DRAINING" },
      );
      expect(existsSync(readyFile)).toBe(false);
      expect(shutdownAnswered).toBe(false);

      app.release(1);
      await app.until((a) => a.held === 1);
      expect(existsSync(readyFile)).toBe(false);
      app.release(1);
      expect(await Promise.all(held)).toHaveLength(2);
      const { stdout } = await shutdown;
      const events = stdout.trim().split("\n").map((l) => JSON.parse(l));
      expect(events.filter((e) => e.event === "open_count").at(-1)).toMatchObject({
        what: "inflight_requests",
        count: 0,
      });
      expect(events.map((e) => e.event)).toContain("healthcheck_failed");
      expect(events.find((e) => e.event === "agent_drain_skipped")).toMatchObject({
        url: "http://127.0.0.1:9/drain",
        reason: "ECONNREFUSED",
      });
      expect(await preStop).toBe(200);
    } finally {
      manager.kill("SIGTERM");
    }
  });

  it("a held GET /shutdown is answered 200 when the manager is stopped right after the ready file appears (the kubelet's order)", async () => {
    const readyFile = join(mkdtempSync(join(tmpdir(), "lastcall-contour-")), "ok");
    const manager = spawn(lastcall, [
      ...prefix,
      "shutdown-manager",
      "--serve-port",
      "0",
      "--ready-file",
      readyFile,
    ], { stdio: ["ignore", "pipe", "inherit"] });
    const events: Record<string, unknown>[] = [];
    const serving = await new Promise<{ port: number }>((resolve) => {
      createInterface({ input: manager.stdout! }).on("line", (line) => {
        const event = JSON.parse(line);
        events.push(event);
        if (event.event === "serving") resolve(event);
      });
    });
    const exited = new Promise((done) =>
      manager.once("exit", (code, signal) => done({ code, signal }))
    );
    const preStop = fetch(`http://127.0.0.1:${serving.port}/shutdown`).then(
      (r) => r.status,
      (error) => `failed: ${error.cause?.code ?? error.message}`,
    );
    await waitFor(() => (events.some((e) => e.event === "shutdown_requested") ? true : undefined), {
      what: "the held request",
    });
    // The shutdown-manager container's preStop (`shutdown`) writes the file and returns; the
    // kubelet sends SIGTERM to that container at once, before the next 100 ms check.
    await runFile("sh", ["-c", `touch ${readyFile}`]);
    manager.kill("SIGTERM");
    expect(await preStop).toBe(200);
    expect(await exited).toEqual({ code: 0, signal: null });
    expect(events.find((e) => e.event === "shutdown_ready")).toMatchObject({
      ready_file: readyFile,
    });
  });

  it("today's Contour: Envoy's admin on a Unix socket, lastcall run as the Envoy container, shutdown with Contour's flags", async () => {
    const dir = mkdtempSync(join(tmpdir(), "lastcall-contour-"));
    const socket = join(dir, "admin.sock");
    const readyFile = join(dir, "ok");
    // As Contour's bootstrap: admin on a pipe (here in a temporary folder instead of /admin).
    const config = {
      ...inboundConfig({ upstreamPort: app.port }),
      admin: { address: { pipe: { path: socket } } },
    };
    const lc = startLastcall(config);
    const ready = await lc.event("ready");
    expect(ready.admin).toBe(`unix:${socket}`);
    const status = await lc.statusUrl();
    expect((await fetch(`${status}/healthz/ready`)).status).toBe(200);
    const { stdout: listeners } = await runFile("curl", [
      "-s",
      "--unix-socket",
      socket,
      "http://admin/listeners?format=json",
    ]);
    const port = JSON.parse(listeners).listener_statuses[0].local_address.socket_address.port_value;
    const held = fetch(`http://127.0.0.1:${port}/hold`).then((r) => r.status);
    await app.until((a) => a.held === 1);
    // Contour v1.33's preStop of the shutdown-manager container, flag for flag.
    const shutdown = runFile(lastcall, [
      ...prefix,
      "shutdown",
      "--admin-address",
      socket,
      "--check-interval",
      "50ms",
      "--ready-file",
      readyFile,
      "--status-url",
      status,
    ]);
    // lastcall run's drain starts with the hook's: readiness fails, the held request still counts.
    const drainStart = await lc.event("drain_start");
    expect(drainStart.source).toBe("POST /drain");
    await new Promise((done) => setTimeout(done, 300));
    expect(existsSync(readyFile)).toBe(false);
    app.release();
    expect(await held).toBe(200);
    const events = (await shutdown).stdout.trim().split("\n").map((l) => JSON.parse(l));
    expect(events.map((e) => e.event)).toContain("healthcheck_failed");
    expect(events.filter((e) => e.event === "open_count").at(-1)).toMatchObject({
      what: "inflight_requests",
      count: 0,
    });
    expect(existsSync(readyFile)).toBe(true);
    expect(events.find((e) => e.event === "agent_drain")).toMatchObject({
      url: `${status}/drain`,
      status: 200,
    });
    // The kubelet's SIGTERM after the hook: the drain that began with the hook goes on (one
    // drain_start, its --min-drain counted from then) and ends on the confirmed zero.
    lc.signal("SIGTERM");
    expect(await lc.event("terminated")).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
    });
    expect(lc.events.filter((e) => e.event === "drain_start")).toHaveLength(1);
    expect(lc.events.find((e) => e.event === "drain_wait_done")!.ms).toBeGreaterThanOrEqual(5000);
  });
});
