// A reload racing the app's preStop's termination (a ConfigMap update or SIGHUP landing as the pod
// ends): nothing the reload starts outlives lastcall, and a slow reader still gets every byte.
// Real Envoy, real lastcall, the defaults (hot restart, --min-drain 5s).
import { describe, expect, it } from "vitest";
import { isAlive, unixSocketConfig } from "../support/lastcall.ts";
import { serving, upstreamForFile } from "../support/serving.ts";
import { slowDownload } from "../support/slow-reader.ts";
import { BODY, RATE } from "./delivery-support.ts";
import { podEndsUnder } from "./app-stop-support.ts";

const app = upstreamForFile();

describe("a reload racing the app's preStop's termination", () => {
  it("SIGHUP once the hook's termination began: skipped, the reader gets every byte", async () => {
    const { lc, port, status } = await serving(app.port, []);
    await podEndsUnder(lc, status, slowDownload(port, `/bytes?n=${BODY}`, RATE), async () => {
      await lc.event("terminate");
      lc.signal("SIGHUP");
    });
    expect(await lc.event("reload_skipped")).toMatchObject({
      reason: "SIGHUP",
      why: "terminating",
    });
    expect(lc.events.map((e) => e.event)).not.toContain("epoch");
  });

  // The parent's admin went to its child: its own buffers cannot be read, so the stop waits (up to
  // its delayed close) for the parent's last connection to close rather than say it unchecked.
  it("a hot restart under way as the pod ends: the parent's reader gets every byte, the stop says 0 unsent, every Envoy is gone", async () => {
    const { lc, port, status } = await serving(app.port, []);
    const download = slowDownload(port, `/bytes?n=${BODY}`, RATE);
    await download.reached(RATE);
    lc.signal("SIGHUP"); // the reader's connection stays with the parent, which drains
    const child = await lc.event("epoch");
    await podEndsUnder(lc, status, download);
    const pids = lc.events.filter((e) => e.event === "start" || e.event === "epoch").map((e) =>
      Number(e.pid)
    );
    expect(pids).toHaveLength(2);
    expect(pids).toContain(Number(child.pid));
    expect(pids.filter(isAlive)).toEqual([]);
  });

  it("a hot restart under way as the pod ends, on a unix-socket listener: every byte, 0 unsent", async () => {
    const { config, path } = unixSocketConfig(app.port);
    const { lc, status } = await serving(app.port, [], { config, listener: null });
    const download = slowDownload({ path }, `/bytes?n=${BODY}`, RATE);
    await download.reached(RATE);
    lc.signal("SIGHUP");
    await lc.event("epoch");
    await podEndsUnder(lc, status, download);
  });
});
