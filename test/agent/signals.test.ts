// Every signal does something documented and safe in `run`, `exec`, `wait` and `shutdown-manager`,
// as PID 1 and not.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { constants, tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { http1 } from "../filter/clients.ts";
import { inboundConfig, isAlive, startLastcall, type TestLastcall } from "../support/lastcall.ts";
import {
  AS_PID_1,
  type CommandProcess,
  inspectorAnswers,
  inspectorOpensWithin,
  killCommands,
  pid1Of,
  pid1Unavailable,
  startCommand,
  startStatusStandIn,
  type StatusStandIn,
} from "../support/processes.ts";
import { agentSees, serving, upstreamForFile } from "../support/serving.ts";

const app = upstreamForFile();
afterEach(killCommands);

const STOPS = ["SIGTERM", "SIGINT", "SIGQUIT"] as const;
const IGNORED = ["SIGHUP", "SIGUSR1", "SIGUSR2"] as const;
const status = (signal: NodeJS.Signals) => 128 + constants.signals[signal];
/** How long the inspector port is watched after SIGUSR1 (the control opens it in far less). */
const INSPECTOR_WINDOW_MS = 1500;
const noPid1 = pid1Unavailable();

let standIn: StatusStandIn;
afterEach(() => standIn?.close());

/** Resolves once `command` has probed `s` `count` times; rejects with its output if it exits first. */
async function probed(s: StatusStandIn, command: CommandProcess, count = 1): Promise<void> {
  await Promise.race([
    s.until((x) => x.probes >= count, `probe ${count}`),
    command.exited.then((exit) => {
      throw new Error(
        `exited (${JSON.stringify(exit)}) before probe ${count}:\n${command.output()}`,
      );
    }),
  ]);
}

/** A stand-in status server for this test (closed after it). */
async function newStandIn(): Promise<StatusStandIn> {
  standIn = await startStatusStandIn();
  return standIn;
}

describe("Node's inspector (SIGUSR1's default)", () => {
  beforeAll(async () => {
    // Nothing else may hold the port, or the checks below would see it.
    expect(await inspectorAnswers()).toBe(false);
  });

  it("control: a plain Node process opens it on SIGUSR1, so the look at the port below can see one", async () => {
    const child = spawn(
      process.execPath,
      ["-e", "setInterval(() => {}, 1000); console.log('up')"],
      { stdio: ["ignore", "pipe", "ignore"] },
    );
    await new Promise((done) => child.stdout!.once("data", done));
    child.kill("SIGUSR1");
    try {
      expect(await inspectorOpensWithin(INSPECTOR_WINDOW_MS / 3)).toBe(true);
    } finally {
      child.kill("SIGKILL");
      await new Promise((done) => child.once("exit", done));
    }
    // Its socket goes with it.
    expect(await inspectorAnswers()).toBe(false);
  });

  it.each(["bundle", "binary", "deno"] as const)(
    "%s: SIGUSR1, SIGUSR2 and SIGHUP to lastcall wait: no inspector, the wait goes on and ends ready",
    async (runtime) => {
      const s = await newStandIn();
      const wait = startCommand(["wait", "--status-url", s.url], { runtime });
      // Probes come every 100 ms: a process that has run for over half a second (Deno arms its
      // SIGUSR1 inspector 500 ms after start).
      await probed(s, wait, 8);
      for (const signal of ["SIGUSR1", "SIGUSR2", "SIGHUP"] as const) wait.child.kill(signal);
      if (runtime === "deno") {
        // Deno (2.9.2 and later) opens its inspector on SIGUSR1 whatever listeners there are, once
        // it armed that: 500 ms after its event loop started, a moment no one outside can see (and
        // later on a loaded node). lastcall closes it as soon as it sees it, and says so. Until it
        // says so the signal goes again; in between the port must never be found open.
        let said = false;
        const closed = wait.untilOutput(/closed the inspector the runtime opened on SIGUSR1/).then(
          () => (said = true),
        );
        for (let sent = 1; !said; sent++) {
          await Promise.race([closed, new Promise((done) => setTimeout(done, 2000))]);
          if (said) break;
          expect(
            await inspectorAnswers(),
            `9229 open, and no word from lastcall, after SIGUSR1 #${sent}`,
          ).toBe(false);
          wait.child.kill("SIGUSR1");
        }
      }
      expect(await inspectorOpensWithin(INSPECTOR_WINDOW_MS)).toBe(false);
      const probes = s.probes;
      await s.until((x) => x.probes >= probes + 2, "more probes after the signals");
      s.ready = true;
      expect(await wait.exited).toEqual({ code: 0, signal: null });
      if (runtime !== "deno") expect(wait.output()).toBe("");
    },
  );
});

describe("lastcall run", () => {
  it("SIGQUIT (default settings): the termination sequence of SIGTERM: the held request gets its 200, `terminated`, exit 0, run folder removed", async () => {
    const tmp = mkdtempSync(join(tmpdir(), "lastcall-test-"));
    try {
      const { lc, port, status: statusUrl } = await serving(app.port, [], { env: { TMPDIR: tmp } });
      expect(readdirSync(tmp)).toHaveLength(1); // the run folder
      const held = http1(port, "/hold");
      await app.until((a) => a.held === 1);
      await agentSees(statusUrl, 1);
      lc.signal("SIGQUIT");
      expect(await lc.event("terminate")).toMatchObject({ source: "SIGQUIT" });
      await lc.event("listeners_draining");
      app.release();
      expect(await held).toEqual({ status: 200, reset: false });
      expect(await lc.event("terminated")).toMatchObject({
        reason: "inflight_zero",
        inflight_at_stop: 0,
      });
      expect(await lc.exited).toEqual({ code: 0, signal: null });
      expect(readdirSync(tmp)).toEqual([]);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });

  it("SIGUSR1 (default settings): `signal_ignored`, nothing on 9229, the held request is fine; then SIGTERM ends it properly", async () => {
    const { lc, port, status: statusUrl } = await serving(app.port, []);
    const held = http1(port, "/hold");
    await app.until((a) => a.held === 1);
    await agentSees(statusUrl, 1);
    lc.signal("SIGUSR1");
    expect(await lc.event("signal_ignored", (e) => e.signal === "SIGUSR1")).toBeDefined();
    expect(await inspectorOpensWithin(INSPECTOR_WINDOW_MS)).toBe(false);
    expect(isAlive(lc.pid)).toBe(true);
    expect(lc.events.map((e) => e.event)).not.toContain("terminate");
    expect(lc.events.map((e) => e.event)).not.toContain("drain_start");
    app.release();
    expect(await held).toEqual({ status: 200, reset: false });
    lc.signal("SIGTERM");
    expect(await lc.event("terminated")).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
    });
    expect(await lc.exited).toEqual({ code: 0, signal: null });
  });

  it.skipIf(noPid1)(
    `as PID 1 (${noPid1 ?? "unshare"}): SIGUSR1 is ignored, SIGTERM runs the termination sequence`,
    async () => {
      const lc: TestLastcall = startLastcall(inboundConfig({ upstreamPort: app.port }), {
        wrap: AS_PID_1,
      });
      await lc.event("ready");
      const pid = await pid1Of(lc.pid);
      process.kill(pid, "SIGUSR1");
      await lc.event("signal_ignored", (e) => e.signal === "SIGUSR1");
      process.kill(pid, "SIGTERM");
      expect(await lc.event("terminate")).toMatchObject({ source: "SIGTERM" });
      expect(await lc.event("terminated")).toMatchObject({
        reason: "inflight_zero",
        inflight_at_stop: 0,
      });
      expect(await lc.exited).toEqual({ code: 0, signal: null });
    },
  );
});

describe("lastcall wait", () => {
  it.each(STOPS)(
    "%s: stops waiting at once, one line, exit 128 + the signal's number",
    async (signal) => {
      const s = await newStandIn();
      const wait = startCommand(["wait", "--status-url", s.url]);
      await probed(s, wait);
      wait.child.kill(signal);
      expect(await wait.exited).toEqual({ code: status(signal), signal: null });
      expect(wait.output()).toBe(
        `lastcall wait: stopped by ${signal} before the proxy was ready (last: ${s.url} says stand-in not ready)\n`,
      );
    },
  );

  it.skipIf(noPid1)(
    `as PID 1 (${noPid1 ?? "unshare"}): SIGHUP is ignored, SIGTERM stops the wait`,
    async () => {
      const s = await newStandIn();
      const wait = startCommand(["wait", "--status-url", s.url], { pid1: true });
      await probed(s, wait);
      const pid = await wait.pid();
      process.kill(pid, "SIGHUP");
      await s.until((x) => x.probes >= 3, "probes after SIGHUP");
      process.kill(pid, "SIGTERM");
      expect(await wait.exited).toEqual({ code: 143, signal: null });
    },
  );
});

/** An app that says which signals it gets, and exits 7 on SIGTERM. */
const SIGNAL_LOGGING_APP = `
for (const name of ["SIGTERM", "SIGINT", "SIGQUIT", "SIGHUP", "SIGUSR1", "SIGUSR2"]) {
  process.on(name, () => { console.log("app got " + name); if (name === "SIGTERM") process.exit(7); });
}
setInterval(() => {}, 1000);
console.log("app running");
`;

describe("lastcall exec", () => {
  it.each(STOPS)(
    "%s while waiting for readiness: exec ends at once with 128 + the signal's number, the app is never started",
    async (signal) => {
      const s = await newStandIn();
      const marker = join(tmpdir(), `lastcall-test-never-${process.pid}-${signal}`);
      const exec = startCommand([
        "exec",
        "--status-url",
        s.url,
        "--",
        process.execPath,
        "-e",
        `require("fs").writeFileSync(${JSON.stringify(marker)}, "")`,
      ]);
      await probed(s, exec);
      exec.child.kill(signal);
      expect(await exec.exited).toEqual({ code: status(signal), signal: null });
      expect(exec.output()).toBe(
        `lastcall exec: stopped by ${signal} before the proxy was ready (last: ${s.url} says stand-in not ready)\n`,
      );
      expect(existsSync(marker)).toBe(false);
      expect(s.apps).toEqual([]);
    },
  );

  it("SIGHUP, SIGUSR1, SIGUSR2 while waiting: ignored; the app starts once ready", async () => {
    const s = await newStandIn();
    const exec = startCommand([
      "exec",
      "--no-quit",
      "--status-url",
      s.url,
      "--",
      process.execPath,
      "-e",
      "console.log('app ran')",
    ]);
    await probed(s, exec);
    for (const signal of IGNORED) exec.child.kill(signal);
    expect(await inspectorOpensWithin(INSPECTOR_WINDOW_MS)).toBe(false);
    const probes = s.probes;
    await s.until((x) => x.probes >= probes + 2, "more probes after the signals");
    s.ready = true;
    expect(await exec.exited).toEqual({ code: 0, signal: null });
    expect(exec.output()).toBe("app ran\n");
  });

  it("once the app runs: it gets each of the six signals, renews its lease, and exec exits with its status", async () => {
    const s = await newStandIn();
    s.ready = true;
    const exec = startCommand([
      "exec",
      "--no-quit",
      "--status-url",
      s.url,
      "--",
      process.execPath,
      "-e",
      SIGNAL_LOGGING_APP,
    ]);
    await exec.untilOutput(/app running/);
    // The lease: said again every 2 s while the app runs, under one id.
    await s.until(
      (x) => x.apps.filter((a) => a.state === "running").length >= 2,
      "a renewal of the app's lease",
    );
    for (
      const signal of ["SIGHUP", "SIGUSR1", "SIGUSR2", "SIGINT", "SIGQUIT", "SIGTERM"] as const
    ) {
      exec.child.kill(signal);
      await exec.untilOutput(new RegExp(`app got ${signal}`));
    }
    expect(await exec.exited).toEqual({ code: 7, signal: null });
    expect(new Set(s.apps.map((a) => a.id)).size).toBe(1);
    expect(s.apps.at(-1)).toMatchObject({ state: "exited", status: 7 });
    expect(await inspectorAnswers()).toBe(false);
  });

  it.skipIf(noPid1)(
    `as PID 1 (what classic inject writes; ${
      noPid1 ?? "unshare"
    }): SIGTERM while waiting for readiness ends it at once`,
    async () => {
      const s = await newStandIn();
      const exec = startCommand([
        "exec",
        "--status-url",
        s.url,
        "--",
        process.execPath,
        "-e",
        "console.log('app ran')",
      ], { pid1: true });
      await probed(s, exec);
      const signalledAt = Date.now();
      process.kill(await exec.pid(), "SIGTERM");
      expect(await exec.exited).toEqual({ code: 143, signal: null });
      expect(Date.now() - signalledAt).toBeLessThan(5000); // not at exec's --timeout (60 s), not at the kubelet's SIGKILL
      expect(exec.output()).not.toContain("app ran");
    },
  );
});

describe("lastcall shutdown-manager", () => {
  /** Starts it on a free port; resolves once it serves. */
  async function manager(pid1 = false) {
    const dir = mkdtempSync(join(tmpdir(), "lastcall-test-"));
    const sm = startCommand([
      "shutdown-manager",
      "--serve-port",
      "0",
      "--ready-file",
      join(dir, "ok"),
    ], { pid1 });
    sm.exited.then(() => rmSync(dir, { recursive: true, force: true }));
    await sm.untilOutput(/"event":"serving"/);
    const port = Number(/"port":(\d+)/.exec(sm.output())![1]);
    return { sm, healthz: () => fetch(`http://127.0.0.1:${port}/healthz`).then((r) => r.status) };
  }

  it.each(STOPS)(
    "%s: closes and exits 0 (after SIGHUP, SIGUSR1, SIGUSR2: ignored, still serving)",
    async (signal) => {
      const { sm, healthz } = await manager();
      for (const ignored of IGNORED) sm.child.kill(ignored);
      expect(await inspectorOpensWithin(INSPECTOR_WINDOW_MS)).toBe(false);
      expect(await healthz()).toBe(200);
      sm.child.kill(signal);
      expect(await sm.exited).toEqual({ code: 0, signal: null });
    },
  );

  it.skipIf(noPid1)(`as PID 1 (${noPid1 ?? "unshare"}): SIGTERM closes it, exit 0`, async () => {
    const { sm, healthz } = await manager(true);
    expect(await healthz()).toBe(200);
    process.kill(await sm.pid(), "SIGTERM");
    expect(await sm.exited).toEqual({ code: 0, signal: null });
  });
});
