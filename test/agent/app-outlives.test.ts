// The sidecar outlives the app's own shutdown: the app's outbound calls are counted and lastcall
// waits for the app to exit.
import { spawn } from "node:child_process";
import { createServer, type Server } from "node:net";
import { describe, expect, it, onTestFinished } from "vitest";
import { APP_LEASE_MS } from "../../agent/supervise/app-watch.ts";
import { isAlive, lastcallCommand, type LastcallEvent, podConfig } from "../support/lastcall.ts";
import { serving, upstreamForFile } from "../support/serving.ts";

const app = upstreamForFile();

// The app: on SIGTERM it keeps calling out through Envoy for a while (one call every 150 ms,
// each 50 ms long, so the count touches zero between them), then exits 0 if every call got 200.
const SHUTTING_DOWN_APP = `
const http = require("node:http");
const port = Number(process.argv[1]);
const call = () => new Promise((done) => {
  const req = http.get({ host: "127.0.0.1", port, path: "/delay?ms=50", agent: false }, (res) => { res.resume(); res.on("end", () => done(res.statusCode)); });
  req.on("error", () => done(0));
});
setInterval(() => {}, 1000);
process.on("SIGTERM", async () => {
  const statuses = [];
  for (let i = 0; i < 12; i++) { statuses.push(await call()); await new Promise((d) => setTimeout(d, 100)); }
  console.log("app calls:", statuses.join(","));
  process.exit(statuses.every((s) => s === 200) ? 0 : 1);
});
console.log("app running");
`;

describe("an app that calls out while it shuts down", () => {
  it.each([
    { name: "default settings", args: [] },
    {
      name: "--min-drain 0s (the wait is the app's, not the floor's)",
      args: ["--min-drain", "0s"],
    },
  ])(
    "under lastcall exec ($name): the outbound calls all succeed, the drain ends after the app exited",
    async ({ args }) => {
      const { lc, status } = await serving(app.port, args, { config: podConfig(app.port) });
      expect(await lc.event("start")).toMatchObject({
        filter: ["ingress"],
        filter_outbound: ["egress"],
      });
      const egressPort = await lc.listenerPort("egress");
      const [command, ...prefix] = lastcallCommand("bundle");
      const exec = spawn(command, [
        ...prefix,
        "exec",
        "--status-url",
        `${status}/healthz/ready`,
        "--",
        process.execPath,
        "-e",
        SHUTTING_DOWN_APP,
        String(egressPort),
      ], { stdio: ["ignore", "pipe", "pipe"] });
      let output = "";
      exec.stdout!.on("data", (chunk) => (output += chunk));
      exec.stderr!.on("data", (chunk) => (output += chunk));
      const execExit = new Promise<number | null>((done) =>
        exec.once("exit", (code) => done(code))
      );
      await lc.event("app_running");
      while (!output.includes("app running")) {
        await new Promise((done) => exec.stdout!.once("data", done));
      }
      // The kubelet: SIGTERM to both containers at once.
      exec.kill("SIGTERM");
      lc.signal("SIGTERM");
      expect(await execExit).toBe(0);
      expect(output).toMatch(/app calls: (200,){11}200/);
      const terminated = await lc.event("terminated");
      expect(terminated).toMatchObject({ reason: "inflight_zero", inflight_at_stop: 0 });
      const order = (name: string) => lc.events.findIndex((e: LastcallEvent) => e.event === name);
      expect(order("app_exited")).toBeGreaterThan(order("drain_start"));
      expect(order("drain_wait_done")).toBeGreaterThan(order("app_exited"));
      // Without the floor, the drain had to wait for the app itself.
      if (args.length) expect(order("app_wait")).toBeGreaterThan(order("drain_start"));
      if (args.length) expect(order("app_exited")).toBeGreaterThan(order("app_wait"));
    },
  );

  it("with two apps under lastcall exec --no-quit (two wrapped containers): the drain waits for the last to exit", async () => {
    const { lc, status } = await serving(app.port, []);
    const [command, ...prefix] = lastcallCommand("bundle");
    // Each app ends when its parent (the test) says so on stdin, after SIGTERM.
    const start = () => {
      const child = spawn(command, [
        ...prefix,
        "exec",
        "--no-quit",
        "--status-url",
        `${status}/healthz/ready`,
        "--",
        process.execPath,
        "-e",
        "process.on('SIGTERM', () => process.stdin.once('data', () => process.exit(0))); setInterval(() => {}, 1000); console.log('app running');",
      ], { stdio: ["pipe", "pipe", "inherit"] });
      // Running, with its SIGTERM handler in place.
      const listening = new Promise((done) => child.stdout!.once("data", done));
      return {
        child,
        listening,
        exited: new Promise<number | null>((done) => child.once("exit", (code) => done(code))),
      };
    };
    // deno-lint-ignore prefer-const -- the clean-up below is registered before it is started
    let second: ReturnType<typeof start> | undefined;
    const first = start();
    // Whatever happens, no wrapped app outlives the test.
    onTestFinished(() => {
      for (const a of [first, second]) {
        a?.child.kill("SIGTERM"); // forwarded to the app, which then ends on the line below
        a?.child.stdin?.end("go");
      }
    });
    await lc.event("app_running", (e) => e.running === 1);
    second = start();
    await lc.event("app_running", (e) => e.running === 2);
    await Promise.all([first.listening, second.listening]);
    for (const a of [first, second]) a.child.kill("SIGTERM");
    lc.signal("SIGTERM");
    await lc.event("app_wait", (e) => e.running === 2);
    first.child.stdin!.end("go");
    expect(await first.exited).toBe(0);
    await lc.event("app_exited", (e) => e.running === 1);
    expect(lc.events.map((e) => e.event)).not.toContain("drain_wait_done");
    second.child.stdin!.end("go");
    expect(await second.exited).toBe(0);
    await lc.event("app_exited", (e) => e.running === 0);
    expect(await lc.event("terminated")).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
    });
    const order = (match: (e: LastcallEvent) => boolean) => lc.events.findIndex(match);
    expect(order((e) => e.event === "drain_wait_done")).toBeGreaterThan(
      order((e) => e.event === "app_exited" && e.running === 0),
    );
  });

  it("under lastcall exec, both killed by SIGKILL (the kubelet's kill; default settings): the app's lease expires and the drain ends on zero, long before the deadline", async () => {
    const { lc, status } = await serving(app.port, []); // --grace 30s, --stop-margin 2s: deadline at 28 s
    const [command, ...prefix] = lastcallCommand("bundle");
    const exec = spawn(command, [
      ...prefix,
      "exec",
      "--status-url",
      `${status}/healthz/ready`,
      "--",
      process.execPath,
      "-e",
      "setInterval(() => {}, 1000); console.log(process.pid)",
    ], { stdio: ["ignore", "pipe", "inherit"] });
    const appPid = Number(await new Promise((done) => exec.stdout!.once("data", done)));
    onTestFinished(() => {
      for (const pid of [exec.pid!, appPid]) if (isAlive(pid)) process.kill(pid, "SIGKILL");
    });
    expect(await lc.event("app_running")).toMatchObject({ pid: appPid, running: 1 });
    // Neither can say the app exited.
    exec.kill("SIGKILL");
    process.kill(appPid, "SIGKILL");
    lc.signal("SIGTERM");
    const expired = await lc.event("app_expired");
    expect(expired).toMatchObject({ pid: appPid, via: "lastcall exec", running: 0 });
    expect(Number(expired.silent_ms)).toBeGreaterThanOrEqual(APP_LEASE_MS);
    const terminated = await lc.event("terminated");
    expect(terminated).toMatchObject({ reason: "inflight_zero", inflight_at_stop: 0 });
    expect(Number(terminated.drain_ms)).toBeLessThan(APP_LEASE_MS + 5000); // the lease, not the 28 s deadline
    const order = (name: string) => lc.events.findIndex((e: LastcallEvent) => e.event === name);
    expect(order("drain_wait_done")).toBeGreaterThan(order("app_expired"));
  });

  it("with --app-port: waits while the app's port accepts connections", async () => {
    const appServer: Server = createServer();
    await new Promise<void>((done) => appServer.listen(0, "127.0.0.1", done));
    const appPort = (appServer.address() as { port: number }).port;
    const { lc } = await serving(app.port, ["--min-drain", "0s", "--app-port", String(appPort)]);
    lc.signal("SIGTERM");
    expect(await lc.event("app_wait")).toMatchObject({ via: `port ${appPort}` });
    await new Promise((done) => setTimeout(done, 300));
    expect(lc.events.map((e) => e.event)).not.toContain("drain_wait_done");
    await new Promise((done) => appServer.close(done));
    await lc.event("app_exited");
    expect(await lc.event("terminated")).toMatchObject({ reason: "inflight_zero" });
  });
});
