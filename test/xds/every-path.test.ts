// The termination cases of the "every path" issue, with the listener from a real control plane
// (go-control-plane over ADS, state of the world and delta) and the filter put in by lastcall's
// xDS proxy: the drain ends on the filter's confirmed zero, never on a fallback.
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../support/envoy.ts";
import {
  freePort,
  type LastcallEvent,
  startLastcall,
  type TestLastcall,
} from "../support/lastcall.ts";
import { upstreamForFile } from "../support/serving.ts";
import { buildXdsServer, startXdsServer, stopAllXdsServers } from "../support/xds-server/index.ts";
import { basicSnapshot, get, xdsBootstrap, type XdsVariant } from "./resources.ts";

const app = upstreamForFile();
beforeAll(() => void buildXdsServer(), 300_000);
afterEach(() => stopAllXdsServers());

const time = (e: LastcallEvent) => Date.parse(e.ts);

/** lastcall on an ADS bootstrap whose only listener comes from the control plane, answering. */
async function overAds(
  variant: XdsVariant,
  args: string[],
): Promise<{ lc: TestLastcall; port: number }> {
  const cp = await startXdsServer();
  const port = await freePort();
  await cp.push(
    basicSnapshot({ version: "1", listenerPort: port, appPort: app.port, service: "ads", variant }),
  );
  const lc = startLastcall(xdsBootstrap({ xdsPort: cp.port, service: "ads", variant }), { args });
  await lc.event("ready");
  const listeners = await lc.event("xds_listeners");
  expect(listeners.filtered).toEqual(["ingress"]);
  // Read from the Listener's protobuf as the control plane sent it: its address is TCP.
  expect(listeners.counted).toEqual([{
    name: "ingress",
    direction: "INBOUND",
    counted: "filter",
    delivery: "tcp_queue",
  }]);
  await waitFor(async () => (await get(port, "/delay?ms=1").catch(() => undefined)), {
    what: "the LDS listener to answer",
  });
  return { lc, port };
}

describe.each<XdsVariant>(["sotw", "delta"])("over ADS (%s)", (variant) => {
  it("on the default --min-drain: late arrivals are waited for, the drain ends on the confirmed zero after them", async () => {
    const { lc, port } = await overAds(variant, []);
    lc.signal("SIGTERM");
    const start = await lc.event("drain_start");
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) {
      statuses.push((await get(port, "/delay?ms=200")).status);
      await new Promise((done) => setTimeout(done, 250));
    }
    const late = get(port, "/hold");
    await app.until((a) => a.held === 1);
    // Held past the floor's end (min_drain_ms after drain_start): a zero before it ended nothing.
    await new Promise((done) =>
      setTimeout(done, Math.max(0, time(start) + Number(start.min_drain_ms) - Date.now() + 200))
    );
    expect(lc.events.some((e) => e.event === "drain_wait_done")).toBe(false);
    app.release();
    statuses.push((await late).status);
    const lastResponseAt = Date.now();
    expect(statuses.every((s) => s === 200)).toBe(true);
    const terminated = await lc.event("terminated");
    expect(terminated).toMatchObject({ reason: "inflight_zero", inflight_at_stop: 0 });
    expect(time(await lc.event("drain_wait_done"))).toBeGreaterThanOrEqual(lastResponseAt - 5);
    expect(lc.events.some((e) => e.event === "drain_fallback")).toBe(false);
  });

  it("SIGHUP then SIGTERM 30 ms later, one request held: it finishes, inflight_zero", async () => {
    const { lc, port } = await overAds(variant, ["--min-drain", "0s"]);
    const held = get(port, "/hold");
    await app.until((a) => a.held === 1);
    lc.signal("SIGHUP");
    await new Promise((done) => setTimeout(done, 30));
    lc.signal("SIGTERM");
    await lc.event("terminate");
    await new Promise((done) => setTimeout(done, 300));
    expect(lc.events.some((e) => e.event === "drain_wait_done")).toBe(false);
    app.release();
    expect((await held).status).toBe(200);
    expect(await lc.event("terminated")).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
    });
    expect(await lc.exited).toEqual({ code: 0, signal: null });
  });
});
