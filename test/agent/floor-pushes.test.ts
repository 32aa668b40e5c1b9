// A drain's floor: no zero can end the drain before it, so the filters learn of the drain with
// `x-lastcall-quiet` and push nothing per request until just before it ends
// (docs/filter-protocol.md); then they push, and a zero ends the drain as before (every
// termination test that ends on `inflight_zero` after the floor).
import { describe, expect, it } from "vitest";
import { http1 } from "../filter/clients.ts";
import type { LastcallEvent } from "../support/lastcall.ts";
import { holdOne, serving, upstreamForFile } from "../support/serving.ts";

const app = upstreamForFile();
const REQUESTS = 100;
const time = (e: LastcallEvent) => Date.parse(e.ts);

/** Envoy's count of the reports its filter VMs sent (`wasmcustom.lastcall_reports_sent`). */
async function reportsSent(adminUrl: string): Promise<number> {
  const text = await (await fetch(`${adminUrl}/stats?filter=lastcall_reports_sent$`)).text();
  const sent = /lastcall_reports_sent: (\d+)/.exec(text)?.[1];
  if (sent === undefined) throw new Error(`no lastcall_reports_sent in Envoy's stats: ${text}`);
  return Number(sent);
}

describe("a drain's floor", () => {
  it(`on the defaults, ${REQUESTS} requests one at a time during the floor cost a few reports, not two each`, async () => {
    const { lc, port } = await serving(app.port, []);
    lc.signal("SIGTERM");
    await lc.event("listeners_draining");
    const before = await reportsSent(lc.adminUrl());
    for (let i = 0; i < REQUESTS; i++) {
      // Each one moves the count from 0 to 1 and back: a push each way once the filters push.
      expect(await http1(port, "/")).toMatchObject({ status: 200 });
    }
    const sent = await reportsSent(lc.adminUrl()) - before;
    // Still within the floor: the drain has not ended (it would end at the first zero after).
    expect(lc.events.map((e) => e.event)).not.toContain("drain_wait_done");
    console.log(`${REQUESTS} requests during the floor: ${sent} reports`);
    expect(sent).toBeLessThan(REQUESTS / 2);
    lc.signal("SIGKILL");
  });

  it("on the defaults, a reload's parent holds a request when SIGTERM comes: the child stays quiet through the floor, the parent's request ends the drain after it", async () => {
    const { lc, port, status } = await serving(app.port, []);
    const { held } = await holdOne(app, port, status);
    lc.signal("SIGHUP");
    await lc.event("ready", (e) => e.epoch === 1);
    // The child listens on a port of its own (the test's listener asks for port 0).
    const childPort = await lc.listenerPort("ingress");
    lc.signal("SIGTERM");
    const start = await lc.event("drain_start");
    for (let i = 0; i < 20; i++) {
      expect(await http1(childPort, "/")).toMatchObject({ status: 200 }); // one at a time: quiet
    }
    await new Promise((done) =>
      setTimeout(done, Math.max(0, time(start) + Number(start.min_drain_ms) - Date.now() + 200))
    );
    expect(lc.events.map((e) => e.event)).not.toContain("drain_wait_done"); // the parent's request
    app.release();
    expect(await held).toEqual({ status: 200, reset: false });
    expect(await lc.event("terminated")).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
    });
    expect(await lc.exited).toEqual({ code: 0, signal: null });
  });
});
