// `lastcall shutdown` runs Contour's order (drain delay, fail health check, check delay, poll),
// read from its events against a real Envoy.
import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { httpBootstrap } from "../support/envoy-bootstrap.ts";
import { startEnvoy, stopAllEnvoys, type TestEnvoy } from "../support/envoy.ts";
import { msBetween, startHook } from "../support/hook-command.ts";
import { runLastcall } from "../support/lastcall.ts";
import { startUpstreamApp, type UpstreamApp } from "../support/upstream-app.ts";

let app: UpstreamApp;
beforeAll(async () => (app = await startUpstreamApp()));
afterAll(() => app.close());
afterEach(async () => {
  app.release();
  await stopAllEnvoys();
});

/** Envoy's server state: LIVE, or DRAINING once its health check was failed. */
async function envoyState(envoy: TestEnvoy): Promise<string> {
  return ((await (await fetch(`${envoy.adminUrl}/server_info`)).json()) as { state: string }).state;
}

/** `lastcall shutdown` against `envoy`'s admin on a host address (Contour's older form), no lastcall run beside it. */
function shutdown(envoy: TestEnvoy, readyFile: string, flags: string[]) {
  const adminPort = new URL(envoy.adminUrl).port;
  return startHook([
    "shutdown",
    "--admin-address",
    "127.0.0.1",
    "--admin-port",
    adminPort,
    "--ready-file",
    readyFile,
    "--status-url",
    "",
    ...flags,
  ]);
}

describe("lastcall shutdown follows Contour's order", () => {
  it("--drain-delay 2s --check-delay 1s: Envoy serves as before through the delay, then the health check fails, then the check delay, then the checks", async () => {
    const envoy = await startEnvoy(httpBootstrap({ upstreamPort: app.port }));
    const readyFile = join(mkdtempSync(join(tmpdir(), "lastcall-contour-")), "ok");
    const port = envoy.port("ingress");
    const held = fetch(`http://127.0.0.1:${port}/hold`).then((r) => r.status);
    await app.until((a) => a.held === 1);

    const hook = shutdown(envoy, readyFile, [
      "--drain-delay",
      "2s",
      "--check-delay",
      "1s",
      "--check-interval",
      "50ms",
    ]);
    const drainDelay = await hook.event("drain_delay");
    expect(drainDelay.ms).toBe(2000);
    // Within the delay: nothing failed yet, Envoy is LIVE and takes new requests as before.
    expect(await envoyState(envoy)).toBe("LIVE");
    const during = await fetch(`http://127.0.0.1:${port}/`);
    expect(during.status).toBe(200);
    expect(during.headers.get("connection")).not.toBe("close");
    await during.text();
    expect(hook.events.map((e) => e.event)).toEqual(["drain_delay"]);

    const failed = await hook.event("healthcheck_failed");
    expect(msBetween(drainDelay, failed)).toBeGreaterThanOrEqual(2000);
    expect(await envoyState(envoy)).toBe("DRAINING");
    const checkDelay = await hook.event("check_delay");
    expect(checkDelay.ms).toBe(1000);
    const firstCheck = await hook.event("open_count");
    expect(msBetween(checkDelay, firstCheck)).toBeGreaterThanOrEqual(1000);
    expect(firstCheck).toMatchObject({ what: "inflight_requests", count: 1, min: 0 });
    expect(existsSync(readyFile)).toBe(false);

    app.release();
    expect(await held).toBe(200);
    const drained = await hook.event("drained");
    expect(drained.ready_file).toBe(readyFile);
    expect(existsSync(readyFile)).toBe(true);
    expect(await hook.exited).toEqual({ code: 0, signal: null });
    // Contour's order, step for step: nothing before the delay, nothing between the steps.
    const steps = hook.events.map((e) => e.event).filter((name, i, all) =>
      name !== "open_count" || all[i - 1] !== "open_count"
    );
    expect(steps).toEqual([
      "drain_delay",
      "healthcheck_failed",
      "check_delay",
      "open_count",
      "drained",
    ]);
    expect(hook.events.filter((e) => e.event === "open_count").at(-1)).toMatchObject({ count: 0 });
  });

  it("on Contour's defaults (no delays): the health check fails at once and the first check finds nothing in flight", async () => {
    const envoy = await startEnvoy(httpBootstrap({ upstreamPort: app.port }));
    const readyFile = join(mkdtempSync(join(tmpdir(), "lastcall-contour-")), "ok");
    // One answered request: its keep-alive connection stays open, idle, and holds nothing.
    const answered = await fetch(`http://127.0.0.1:${envoy.port("ingress")}/`);
    await answered.text();
    const hook = shutdown(envoy, readyFile, []);
    expect(await hook.exited).toEqual({ code: 0, signal: null });
    expect(hook.events.map((e) => e.event)).toEqual([
      "drain_delay",
      "healthcheck_failed",
      "check_delay",
      "open_count",
      "drained",
    ]);
    expect(hook.events[0]).toMatchObject({ ms: 0 });
    expect(hook.events[2]).toMatchObject({ ms: 0 });
    expect(hook.events[3]).toMatchObject({ what: "inflight_requests", count: 0 });
    expect(await envoyState(envoy)).toBe("DRAINING");
    expect(existsSync(readyFile)).toBe(true);
  });

  it("--help says the order as it is", async () => {
    const result = await runLastcall(["shutdown", "--help"]);
    expect(result.code).toBe(0);
    const help = result.stdout.replace(/\s+/g, " ");
    expect(help).toContain(
      "in Contour's order: wait --drain-delay (Envoy serves as before), fail Envoy's health check and start the drain of a lastcall run beside it, wait --check-delay, then check every --check-interval",
    );
    expect(help).toContain(
      "--drain-delay <duration> wait first, before failing the health check (Envoy serves as before meanwhile) (default: 0s",
    );
    expect(help).toContain(
      "--check-delay <duration> wait after failing the health check, before the first check (default: 0s",
    );
    expect(help).not.toContain("wait after failing the health check (default");
  });
});
