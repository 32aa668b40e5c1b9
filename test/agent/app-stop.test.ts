// The app's SIGTERM waits for the proxy's quiet (`GET /v1/app-stop`, an app container's preStop),
// and no request meets a pod whose app has gone: real Envoy, real lastcall, real app processes,
// on the default settings (--min-drain 5s).
import { type ChildProcess, spawn } from "node:child_process";
import { Agent, request } from "node:http";
import { connect, type Socket } from "node:net";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it, onTestFinished } from "vitest";
import { http1, type Outcome, outcomeOf } from "../filter/clients.ts";
import { envoyConfig } from "../../agent/k8s/envoy-wiring.ts";
import { waitFor } from "../support/envoy.ts";
import { freePort, lastcallCommand, podConfig, runLastcall } from "../support/lastcall.ts";
import { agentSees, serving, upstreamForFile } from "../support/serving.ts";
import { slowDownload, slowH2Download } from "../support/slow-reader.ts";
import { tempDir } from "../support/temp.ts";
import { BODY, RATE } from "./delivery-support.ts";
import { ASKED_AT_MAX_AGE_MS } from "../../agent/drain/plan.ts";
import { appStop, order } from "./app-stop-support.ts";

const app = upstreamForFile();

/** Whether a new TCP connection to `port` is accepted, or how it is refused. */
function connectOutcome(port: number): Promise<string> {
  return new Promise((done) => {
    const socket = connect(port, "127.0.0.1");
    socket.once("connect", () => {
      socket.destroy();
      done("accepted");
    });
    socket.once("error", (error: NodeJS.ErrnoException) => done(error.code ?? error.message));
  });
}

/** An app in its own process: answers every request with 200, exits on SIGTERM. */
async function startAppProcess(): Promise<
  { child: ChildProcess; port: number; exited: Promise<unknown> }
> {
  const child = spawn(process.execPath, [
    "-e",
    `
    const server = require("node:http").createServer((q, s) => s.end("ok"));
    server.listen(0, "127.0.0.1", () => console.log(server.address().port));
    process.on("SIGTERM", () => process.exit(0));`,
  ], { stdio: ["ignore", "pipe", "inherit"] });
  onTestFinished(() => void child.kill("SIGKILL"));
  const exited = new Promise((done) => child.once("exit", done));
  const port = Number(await new Promise((done) => child.stdout!.once("data", done)));
  return { child, port, exited };
}

describe("the app's preStop (GET /v1/app-stop)", () => {
  it("holds past the floor while an inbound request is in flight (not an outbound one), answers once it ends; then new inbound connections are refused and outbound still serves", async () => {
    const { lc, port, status } = await serving(app.port, [], { config: podConfig(app.port) });
    const egress = await lc.listenerPort("egress");
    const inbound = http1(port, "/hold/in");
    const outbound = http1(egress, "/hold/out");
    await app.until((a) => a.held === 2);
    await agentSees(status, 2);
    // The pod's deletion: the native sidecar's preStop (`lastcall drain`) and the app's at once.
    expect((await runLastcall(["drain", "--status-url", status])).code).toBe(0);
    let answered: Record<string, unknown> | undefined;
    const hook = appStop(status).then((answer) => (answered = answer));
    await lc.event("app_stop_wait");
    // A drain_waiting past the 5 s floor (its deadline is 28 s away at the start), the request still held.
    await lc.event("drain_waiting", (e) => 28_000 - Number(e.deadline_in_ms) > 5000);
    expect(answered).toBeUndefined();
    expect(app.releaseWhere((r) => r.url === "/hold/in")).toBe(1);
    expect(await inbound).toEqual({ status: 200, reset: false });
    // The outbound call is still held: the hook waited for the inbound side only, and Envoy
    // still carries the app's calls out.
    expect(await hook).toMatchObject({
      reason: "quiet",
      inbound_closed: true,
      envoy_stopped: false,
    });
    expect(app.held).toBe(1);
    expect(order(lc, "inbound_closed")).toBeGreaterThan(order(lc, "app_stop_wait"));
    expect(await connectOutcome(port)).toBe("ECONNREFUSED");
    expect(await http1(egress, "/")).toEqual({ status: 200, reset: false });
    app.release();
    expect(await outbound).toEqual({ status: 200, reset: false });
    // A second app container's hook gets the same answer at once, and inbound is closed once.
    expect(await appStop(status)).toMatchObject({ reason: "quiet", inbound_closed: true });
    expect(lc.events.filter((e) => e.event === "inbound_closed")).toHaveLength(1);
  });

  it("when no drain begins within a second (a container restart after a failed liveness probe), answers no_drain and changes nothing", async () => {
    const { lc, port, status } = await serving(app.port, []);
    expect(await appStop(status)).toMatchObject({ reason: "no_drain", inbound_closed: false });
    expect(await lc.event("app_stop")).toMatchObject({ reason: "no_drain" });
    expect(lc.events.map((e) => e.event)).not.toContain("drain_start");
    expect(lc.events.map((e) => e.event)).not.toContain("inbound_closed");
    expect((await fetch(`${status}/healthz/ready`)).status).toBe(200);
    expect(await http1(port, "/")).toEqual({ status: 200, reset: false });
  });

  it("native: the sidecar's exec preStop (`lastcall drain`) still starting after the hook's second: the hook waits for its drain, not answering no_drain", async () => {
    const { lc, status } = await serving(app.port, []);
    // A `lastcall drain` process as the kubelet's exec hook starts it on a loaded node: it runs
    // (argv `lastcall drain`), and posts only 2 s later.
    const dir = tempDir();
    writeFileSync(
      join(dir, "drain"),
      `setTimeout(() => fetch(process.env.STATUS + "/drain?sidecar=native", { method: "POST" }), 2000);`,
    );
    const hookProcess = spawn("/bin/bash", ["-c", `exec -a lastcall "${process.execPath}" drain`], {
      cwd: dir,
      env: { ...process.env, STATUS: status },
      stdio: "ignore",
    });
    onTestFinished(() => void hookProcess.kill("SIGKILL"));
    const answer = await appStop(status);
    expect(answer).toMatchObject({ reason: "quiet", inbound_closed: true });
    expect(order(lc, "drain_start")).toBeLessThan(order(lc, "app_stop_wait"));
    lc.signal("SIGTERM");
    expect(await lc.event("terminated")).toMatchObject({ inflight_at_stop: 0 });
  });

  it("native: the floor runs from the preStop's start (`lastcall drain` sends asked_at), not from its POST's late arrival; from at most 3 s before", async () => {
    const { lc, status } = await serving(app.port, []);
    // A loaded node: the hook's process started long before its POST came.
    const asked = Date.now() - 60_000;
    const drain = await fetch(`${status}/drain?sidecar=native&asked_at=${asked}`, {
      method: "POST",
    });
    expect(drain.status).toBe(200);
    const start = await lc.event("drain_start");
    expect(start.floor_from_ms_before).toBe(ASKED_AT_MAX_AGE_MS);
    expect(await appStop(status)).toMatchObject({ reason: "quiet", inbound_closed: true });
    const answered = Date.parse((await lc.event("app_stop")).ts);
    const floorFromStart = Date.parse(start.ts) + Number(start.min_drain_ms);
    expect(answered).toBeGreaterThanOrEqual(floorFromStart - ASKED_AT_MAX_AGE_MS);
    expect(answered).toBeLessThan(floorFromStart);
    lc.signal("SIGTERM");
    expect(await lc.event("terminated")).toMatchObject({ inflight_at_stop: 0 });
  });

  it("asked just before the sidecar's SIGTERM (classic: both at once), waits for the drain's floor, not answering no_drain", async () => {
    const { lc, port, status } = await serving(app.port, []);
    const hook = appStop(status);
    await lc.event("app_stop_asked", (e) => e.draining === false);
    lc.signal("SIGTERM");
    expect(await hook).toMatchObject({ reason: "quiet", inbound_closed: true });
    const start = await lc.event("drain_start");
    const answered = await lc.event("app_stop");
    // lastcall's own clock: the answer came after the floor (--min-drain from the signal).
    expect(Date.parse(answered.ts)).toBeGreaterThanOrEqual(
      Date.parse(start.ts) + Number(start.min_drain_ms),
    );
    expect(await connectOutcome(port)).toBe("ECONNREFUSED");
    expect(await lc.event("terminated")).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
    });
    // Both ended on the same quiet; nothing is left for the proxy (no outbound listener): the
    // hook was answered once Envoy had stopped, so no request can reach the app after it.
    expect(order(lc, "app_stop", (e) => e.envoy_stopped === true)).toBeGreaterThan(
      order(lc, "envoy_quit_requested"),
    );
  });
});

describe("the app's preStop ends a proxy left with nothing to do, once every byte is delivered", () => {
  for (const protocol of ["HTTP/1.1", "HTTP/2"] as const) {
    it(`a slow ${protocol} reader across the pod's end (native, the defaults) gets every byte; the hook answers once Envoy stopped after it`, async () => {
      const { lc, port, status } = await serving(app.port, []);
      const download = protocol === "HTTP/1.1"
        ? slowDownload(port, `/bytes?n=${BODY}`, RATE)
        : slowH2Download(port, `/bytes?n=${BODY}`, RATE);
      await download.reached(RATE);
      expect((await runLastcall(["drain", "--status-url", status])).code).toBe(0);
      const answer = await appStop(status);
      expect(answer).toMatchObject({ reason: "quiet", inbound_closed: true, envoy_stopped: true });
      const read = await download.done;
      expect(read).toMatchObject({ status: 200, expected: BODY, received: BODY });
      expect(await lc.event("terminated")).toMatchObject({
        reason: "inflight_zero",
        inflight_at_stop: 0,
        bytes_unsent_at_stop: 0,
      });
      // The answer came once Envoy had stopped, which it did only with every byte delivered.
      expect(order(lc, "app_stop")).toBeGreaterThan(order(lc, "envoy_quit_requested"));
    });
  }
});

/** A client pool that keeps idle sockets and reuses the latest first (as in the failing CI run). */
async function idlePool(
  port: number,
): Promise<{ get(): Promise<Outcome>; closed: Promise<unknown> }> {
  const agent = new Agent({ keepAlive: true, scheduling: "lifo" });
  onTestFinished(() => agent.destroy());
  const get = (): Promise<Outcome> => {
    const req = request({ host: "127.0.0.1", port, path: "/", agent });
    const outcome = outcomeOf(req);
    req.end();
    return outcome;
  };
  expect(await Promise.all([get(), get(), get(), get()])).toEqual(
    Array(4).fill({ status: 200, reset: false }),
  );
  const idle = Object.values(agent.freeSockets).flat() as Socket[];
  expect(idle.length).toBe(4);
  return {
    get,
    closed: Promise.all(idle.map((socket) => new Promise((done) => socket.once("close", done)))),
  };
}

/** After the pool's idle sockets were closed by Envoy: a request opens a new connection, refused before it is sent. */
async function refusedNot503(pool: { get(): Promise<Outcome> }): Promise<void> {
  for (const outcome of await Promise.all([pool.get(), pool.get()])) {
    expect(outcome.status).toBeUndefined();
  }
}

describe("once the app's preStop is answered, no new inbound request can come", () => {
  it("inject's config, the defaults: a request sent on an idle keep-alive connection right after the answer never reaches the app; new connections are refused", async () => {
    const listenerPort = await freePort();
    const config = envoyConfig([{
      container: "app",
      appPort: app.port,
      listenerPort,
      protocol: "http",
    }]);
    const { lc, port, status } = await serving(app.port, [], {
      config,
      listener: `inbound_${app.port}`,
    });
    const pool = await idlePool(port);
    // The pod's deletion: the native sidecar's preStop and the app's.
    expect((await runLastcall(["drain", "--status-url", status])).code).toBe(0);
    expect(await appStop(status)).toMatchObject({
      reason: "quiet",
      inbound_closed: true,
      envoy_stopped: true,
    });
    // The kubelet now sends the app its SIGTERM: whatever is sent from here must not reach it.
    const forwarded = app.completed;
    const late = [pool.get(), pool.get(), pool.get(), pool.get()];
    for (const outcome of await Promise.all(late)) expect(outcome.status).toBeUndefined();
    await pool.closed;
    await refusedNot503(pool);
    expect(app.completed).toBe(forwarded);
    // The apps' hook ended the proxy within the drain's deadline: no new grace came with it.
    expect(await lc.event("terminate")).toMatchObject({ source: "app-stop" });
    const start = await lc.event("drain_start");
    const deadline = await lc.event("drain_deadline");
    expect(deadline.source).toBe("app-stop");
    expect(Number(deadline.deadline_ms) + Number(deadline.drain_ms)).toBe(
      Number(start.deadline_ms),
    );
    expect(await lc.event("terminated")).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
      bytes_unsent_at_stop: 0,
    });
    expect(await lc.exited).toEqual({ code: 0, signal: null });
  });
});

describe("once every app has gone", () => {
  it("(why: a draining Envoy closes no idle keep-alive connection by itself) one stays open past the floor and the listeners' close, and a request on it is still forwarded", async () => {
    const { lc, port, status } = await serving(app.port, []);
    const socket = connect(port, "127.0.0.1");
    await new Promise((done) => socket.once("connect", done));
    let ended = false;
    socket.once("end", () => (ended = true));
    const answer = (): Promise<string> =>
      new Promise((done) => {
        let text = "";
        const read = (chunk: Buffer) => {
          text += String(chunk);
          if (!/\r\n\r\nok$/.test(text)) return;
          socket.off("data", read);
          done(text);
        };
        socket.on("data", read);
        socket.write("GET / HTTP/1.1\r\nhost: app\r\n\r\n");
      });
    expect(await answer()).toMatch(/^HTTP\/1\.1 200/);
    expect((await fetch(`${status}/drain`, { method: "POST" })).status).toBe(200);
    await lc.event("drain_wait_done");
    await waitFor(
      async () => ((await connectOutcome(port)) === "ECONNREFUSED" ? true : undefined),
      { what: "Envoy to close its listener" },
    );
    expect(ended).toBe(false);
    const late = await answer();
    expect(late).toMatch(/^HTTP\/1\.1 200/);
    expect(late).toMatch(/\r\nconnection: close\r\n/i);
    socket.destroy();
  });

  it("native: the sidecar's SIGTERM during the preStop's drain closes idle keep-alive connections before the floor ends; the client is refused, never answered 503", async () => {
    const appProcess = await startAppProcess();
    const { lc, port, status } = await serving(appProcess.port, []);
    const pool = await idlePool(port);
    // The sidecar's preStop, `lastcall drain` (POST /drain?sidecar=native).
    expect((await runLastcall(["drain", "--status-url", status])).code).toBe(0);
    const start = await lc.event("drain_start");
    // The kubelet: the app exits; only then the sidecar's SIGTERM.
    appProcess.child.kill("SIGTERM");
    await appProcess.exited;
    lc.signal("SIGTERM");
    await pool.closed; // Envoy closed them: no request was sent on them
    const terminated = await lc.event("terminated");
    expect(terminated).toMatchObject({ reason: "inflight_zero", inflight_at_stop: 0 });
    // lastcall's own clock: it stopped before the floor would have ended.
    expect(Date.parse(terminated.ts)).toBeLessThan(
      Date.parse(start.ts) + Number(start.min_drain_ms),
    );
    expect(await lc.event("apps_gone")).toMatchObject({ via: "SIGTERM of a native sidecar" });
    await refusedNot503(pool);
  });

  it("classic: lastcall exec saying the app exited during the drain closes idle keep-alive connections before the floor ends", async () => {
    const appPort = await freePort();
    const { lc, port, status } = await serving(appPort, []);
    const [command, ...prefix] = lastcallCommand("bundle");
    const exec = spawn(command, [
      ...prefix,
      "exec",
      "--no-quit",
      "--status-url",
      status,
      "--",
      process.execPath,
      "-e",
      `
      const server = require("node:http").createServer((q, s) => s.end("ok"));
      server.listen(${appPort}, "127.0.0.1", () => console.log("listening"));
      process.on("SIGTERM", () => process.exit(0));`,
    ], { stdio: ["ignore", "pipe", "inherit"] });
    onTestFinished(() => void exec.kill("SIGKILL"));
    const execExit = new Promise((done) => exec.once("exit", done));
    await new Promise((done) => exec.stdout!.once("data", done));
    await lc.event("app_running");
    const pool = await idlePool(port);
    // The kubelet: SIGTERM to both containers at once.
    exec.kill("SIGTERM");
    lc.signal("SIGTERM");
    await execExit;
    await pool.closed;
    const start = await lc.event("drain_start");
    const terminated = await lc.event("terminated");
    expect(terminated).toMatchObject({ reason: "inflight_zero", inflight_at_stop: 0 });
    expect(order(lc, "terminated")).toBeGreaterThan(order(lc, "app_exited"));
    expect(Date.parse(terminated.ts)).toBeLessThan(
      Date.parse(start.ts) + Number(start.min_drain_ms),
    );
    expect(await lc.event("apps_gone")).toMatchObject({ via: "lastcall exec" });
    await refusedNot503(pool);
  });
});
