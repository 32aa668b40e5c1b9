// SIGUSR2, and the native sidecar's preStop exactly as `inject` writes it, run by a real shell
// against a real lastcall: SIGUSR2 where lastcall is PID 1 (the image's entrypoint),
// `lastcall drain` elsewhere.
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { drainHookCommand } from "../../agent/drain/hook.ts";
import { http1 } from "../filter/clients.ts";
import { inboundConfig, isAlive, startLastcall, type TestLastcall } from "../support/lastcall.ts";
import { AS_PID_1, pid1Of, pid1Unavailable } from "../support/processes.ts";
import { agentSees, serving, upstreamForFile } from "../support/serving.ts";
import { root } from "../support/paths.ts";

const app = upstreamForFile();
const noPid1 = pid1Unavailable();

/** Readiness as the kubelet's probe would see it. */
async function readiness(statusUrl: string): Promise<number> {
  return (await fetch(`${statusUrl}/healthz/ready`)).status;
}

/** lastcall on its defaults with one request held at the app, counted by the filter. */
async function servingOneHeld() {
  const { lc, port, status } = await serving(app.port, []);
  const held = http1(port, "/hold");
  await app.until((a) => a.held === 1);
  await agentSees(status, 1);
  return { lc, status, held };
}

/** The kubelet's SIGTERM after the drain: the apps have gone, nothing is cut, exit 0. */
async function sigtermEndsIt(lc: TestLastcall, kill = () => lc.signal("SIGTERM")): Promise<void> {
  kill();
  expect(await lc.event("apps_gone")).toMatchObject({ via: "SIGTERM of a native sidecar" });
  await exitsWhole(lc);
}

/** Envoy stopped with nothing in flight, lastcall exited 0. */
async function exitsWhole(lc: TestLastcall): Promise<void> {
  expect(await lc.event("terminated")).toMatchObject({
    reason: "inflight_zero",
    inflight_at_stop: 0,
  });
  expect(await lc.exited).toEqual({ code: 0, signal: null });
}

describe("SIGUSR2", () => {
  it("(default settings): a drain in place, as `lastcall drain` asks; the held request is answered, Envoy runs on until SIGTERM", async () => {
    const { lc, status, held } = await servingOneHeld();
    lc.signal("SIGUSR2");
    expect(await lc.event("drain_start")).toMatchObject({ source: "SIGUSR2" });
    expect(await readiness(status)).toBe(503);
    app.release();
    expect(await held).toEqual({ status: 200, reset: false });
    expect(await lc.event("drain_wait_done")).toMatchObject({ reason: "inflight_zero" });
    expect(isAlive(lc.pid)).toBe(true);
    expect(lc.events.map((e) => e.event)).not.toContain("terminate");
    await sigtermEndsIt(lc);
  });
});

describe("SIGUSR2 raced", () => {
  it("against SIGTERM, sent together: whichever lastcall takes first starts the drain, the held request is answered, nothing is cut", async () => {
    const { lc, held } = await servingOneHeld();
    lc.signal("SIGUSR2");
    lc.signal("SIGTERM");
    // The kubelet sends SIGTERM only after the preStop; sent together, either may come first.
    expect((await lc.event("drain_start")).source).toMatch(/^SIG(USR2|TERM)$/);
    app.release();
    expect(await held).toEqual({ status: 200, reset: false });
    await exitsWhole(lc);
  });

  it("against a reload (SIGHUP, then SIGUSR2 at once): the held request is answered, every epoch drains, SIGTERM ends it whole", async () => {
    const { lc, status, held } = await servingOneHeld();
    lc.signal("SIGHUP");
    lc.signal("SIGUSR2");
    expect(await lc.event("drain_start")).toMatchObject({ source: "SIGUSR2" });
    expect(await readiness(status)).toBe(503);
    app.release();
    expect(await held).toEqual({ status: 200, reset: false });
    await sigtermEndsIt(lc);
  });
});

describe("inject's drain hook (the native sidecar's preStop)", () => {
  it("lastcall is not PID 1: the hook runs `lastcall drain`; the held request is answered, then SIGTERM means the apps have gone", async () => {
    const { lc, status, held } = await servingOneHeld();
    const bin = mkdtempSync(join(tmpdir(), "lastcall-test-hook-"));
    try {
      symlinkSync(join(root, "dist/lastcall"), join(bin, "lastcall"));
      const [shell, ...args] = drainHookCommand(["--status-url", status]);
      const hook = spawnSync(shell, args, {
        env: { ...process.env, PATH: `${bin}:${process.env.PATH}` },
        encoding: "utf8",
      });
      expect({ status: hook.status, stderr: hook.stderr }).toEqual({ status: 0, stderr: "" });
    } finally {
      rmSync(bin, { recursive: true, force: true });
    }
    expect(await lc.event("drain_start")).toMatchObject({ source: "POST /drain" });
    expect(await readiness(status)).toBe(503);
    app.release();
    expect(await held).toEqual({ status: 200, reset: false });
    await sigtermEndsIt(lc);
  });

  it.skipIf(noPid1)(
    `lastcall is PID 1 (${noPid1 ?? "unshare"}): the hook sends it SIGUSR2 and starts no lastcall`,
    async () => {
      const lc = startLastcall(inboundConfig({ upstreamPort: app.port }), {
        runtime: "binary",
        wrap: AS_PID_1,
      });
      await lc.event("ready");
      const pid = await pid1Of(lc.pid);
      // Inside lastcall's PID namespace, with no lastcall on PATH: `lastcall drain` cannot run.
      const hook = spawnSync(
        "nsenter",
        ["-t", String(pid), "-p", "-m", "--", ...drainHookCommand()],
        { env: { PATH: "/usr/bin:/bin" }, encoding: "utf8" },
      );
      expect({ status: hook.status, stderr: hook.stderr }).toEqual({ status: 0, stderr: "" });
      expect(await lc.event("drain_start")).toMatchObject({ source: "SIGUSR2" });
      expect(await readiness(await lc.statusUrl())).toBe(503);
      await sigtermEndsIt(lc, () => process.kill(pid, "SIGTERM"));
    },
  );
});
