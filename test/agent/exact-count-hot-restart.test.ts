// The count is exact across a hot restart: during a drain, the requests of the parent and of the
// child Envoy are each counted in their own gauge, and lastcall waits for both processes.
import { writeFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { agentCountAfterReports, envoyCounts } from "../support/counts.ts";
import { waitFor } from "../support/envoy.ts";
import { type HeldClient, heldId, holdHttp1 } from "../support/held-clients.ts";
import {
  freePort,
  inboundConfig,
  isAlive,
  type LastcallEvent,
  startLastcall,
  type TestLastcall,
  writeConfig,
} from "../support/lastcall.ts";
import { randomBatches, shuffled } from "../support/seeded-random.ts";
import { agentState, upstreamForFile } from "../support/serving.ts";
import type { Json } from "../support/json.ts";
import { completed, countChecks, type Counted, randomForTest } from "./exact-count-support.ts";
import { names } from "./termination-support.ts";

const app = upstreamForFile();
const { countsAre, release } = countChecks(app);

/**
 * The inbound config on a fixed port (a hot restart hands the listen socket to the child by
 * address), adding `x-served-by: <tag>` to every request it forwards: the app then knows which
 * Envoy process holds each request.
 */
function taggedConfig(port: number, tag: string): Json {
  const config = inboundConfig({ upstreamPort: app.port }) as Json;
  const listener = config.static_resources.listeners[0];
  listener.address.socket_address.port_value = port;
  listener.filter_chains[0].filters[0].typed_config.route_config.request_headers_to_add = [
    { header: { key: "x-served-by", value: tag }, append_action: "OVERWRITE_IF_EXISTS_OR_ADD" },
  ];
  // A hot-restart child imports its parent's stats at each flush: every second, not every five.
  config.stats_flush_interval = "1s";
  return config;
}

/**
 * The termination's `drain_wait_done`: the one whose `ms` counts from `drain_start` (a hot
 * restart's parent logs its own `drain_wait_done` when it finishes, counted from `epoch_draining`).
 */
function terminationDone(lc: TestLastcall): LastcallEvent | undefined {
  const start = lc.events.find((e) => e.event === "drain_start");
  if (!start) return undefined;
  return lc.events.find((e) =>
    e.event === "drain_wait_done" &&
    Math.abs(Date.parse(e.ts) - Number(e.ms) - Date.parse(start.ts)) <= 50
  );
}

describe("a hot restart during the drain", () => {
  it("waits for the requests of both processes, each in its own gauge, and exits right after the last", async () => {
    const { seed, random } = randomForTest();
    const port = await freePort();
    const configPath = writeConfig(taggedConfig(port, "epoch0"));
    const lc = startLastcall(configPath); // lastcall's defaults
    const parent = await lc.event("ready");
    const status = await lc.statusUrl();
    await waitFor(
      async () => ((await agentState(status)).filter === "reporting" ? true : undefined),
      { what: "the filter's first report" },
    );
    const clients = new Map<number, HeldClient>();
    for (let id = 0; id < 16; id++) clients.set(id, holdHttp1(port, id));
    await countsAre({ lc, status, vms: 3 }, 16, "epoch 0 holds 16"); // read in epoch 0's admin

    writeFileSync(configPath, JSON.stringify(taggedConfig(port, "epoch1")));
    lc.signal("SIGHUP");
    const child = await lc.event("ready", (e) => e.epoch === 1);
    await lc.event("epoch_draining", (e) => (e.epochs as number[]).includes(0));
    for (let id = 16; id < 32; id++) clients.set(id, holdHttp1(port, id));
    await app.until((a) => a.held === 32);
    // Which process holds each request: the app sees the tag of the config it came through (the
    // parent may still have accepted a few as the child started).
    const servedBy = (tag: string) =>
      app.heldRequests().filter((r) => r.headers["x-served-by"] === tag).map(heldId);
    const inParent = new Set(servedBy("epoch0"));
    const inChild = new Set(servedBy("epoch1"));
    expect(inParent.size + inChild.size).toBe(32);
    expect(inParent.size).toBeGreaterThanOrEqual(16);
    expect(inChild.size).toBeGreaterThan(0);

    // The parent's admin went to the child: the child's admin shows its own gauge, the parent's
    // (imported at each stats flush, 1 s here) and Envoy's request count of both (merged likewise).
    const counted: Counted = { lc, status, vms: 2 * 3 };
    const bothAre = async (step: string) => {
      const parentLeft = [...inParent].filter((id) => clients.has(id)).length;
      const childLeft = [...inChild].filter((id) => clients.has(id)).length;
      await app.until((a) =>
        a.held === parentLeft + childLeft && a.inflight === parentLeft + childLeft
      );
      const want = {
        step,
        childGauge: childLeft,
        parentGauge: parentLeft,
        rqActive: parentLeft + childLeft,
      };
      const read = async () => {
        const counts = await envoyCounts(String(child.admin));
        return {
          step,
          childGauge: counts.gaugeOdd,
          parentGauge: counts.gauge,
          rqActive: counts.rqActive,
        };
      };
      await waitFor(async () => ((await read()).childGauge === childLeft ? true : undefined), {
        what: `the child's gauge to be ${childLeft} (${step})`,
      });
      expect((await read()).childGauge).toBe(childLeft); // its own: exact as soon as the streams are gone
      // The parent's and Envoy's totals come through the stats merge, up to a flush late.
      await expect.poll(read, { timeout: 5000, interval: 50 }).toEqual(want);
      // During a drain each VM also names its holders about once a second (a report of its own),
      // and a process at zero answers a probe for each of its zero hints (heartbeats and holders
      // reports alike): no number of reports proves that a period has passed. The count must
      // still come right with the other process's next heartbeats: within three periods.
      await agentCountAfterReports(status, 2 * counted.vms + 1);
      await expect.poll(async () => ({ step, agent: (await agentState(status)).inflight }), {
        timeout: 3000,
        interval: 50,
      }).toEqual({ step, agent: parentLeft + childLeft });
      return { parentLeft, childLeft };
    };
    await bothAre("both hold");

    lc.signal("SIGTERM");
    await lc.event("listeners_draining");
    await bothAre("draining, both hold");
    // One process empties first (chosen by the seed), then the other; random batches throughout.
    const parentFirst = random() < 0.5;
    const [first, second] = parentFirst ? [inParent, inChild] : [inChild, inParent];
    const order = [...shuffled([...first], random), ...shuffled([...second], random)];
    const batches = randomBatches(order, 6, random);
    console.log(
      `hot restart, seed ${seed}: parent ${inParent.size}, child ${inChild.size}; ${
        parentFirst ? "parent" : "child"
      } empties first; batches ${batches.map((b) => b.length)}`,
    );
    for (const [step, batch] of batches.slice(0, -1).entries()) {
      expect(await release(clients, batch)).toEqual(batch.map(() => completed));
      for (const id of batch) clients.delete(id);
      const { parentLeft } = await bothAre(`step ${step + 1}/6: released ${batch.length}`);
      expect(terminationDone(lc)).toBeUndefined();
      expect(names(lc)).not.toContain("envoy_quit_requested");
      expect(isAlive(lc.pid)).toBe(true);
      if (parentLeft === 0) {
        // The parent finished its own requests: lastcall says so, and still waits for the child's.
        expect(await lc.event("epoch_drained", (e) => (e.epochs as number[]).includes(0)))
          .toMatchObject({ reason: "inflight_zero", inflight_at_stop: 0 });
      } else {
        expect(names(lc)).not.toContain("epoch_drained");
      }
    }

    const last = batches.at(-1)!;
    const eventsBefore = lc.events.length;
    const releasedAt = Date.now();
    expect(await release(clients, last)).toEqual(last.map(() => completed));
    const terminated = await lc.event("terminated");
    expect(terminated).toMatchObject({
      mode: "inflight",
      reason: "inflight_zero",
      inflight_at_stop: 0,
    });
    expect(await lc.exited).toEqual({ code: 0, signal: null });
    const done = terminationDone(lc);
    expect(done).toMatchObject({ reason: "inflight_zero" });
    expect(lc.events.indexOf(done!)).toBeGreaterThanOrEqual(eventsBefore);
    expect(Date.parse(done!.ts)).toBeGreaterThanOrEqual(releasedAt);
    expect(lc.events.indexOf(done!)).toBeLessThan(names(lc).indexOf("envoy_quit_requested"));
    const after = names(lc).slice(eventsBefore);
    console.log(`hot restart: after the last release: ${after.join(", ")}`);
    expect(after.filter((n) => ["envoy_quit_requested", "terminated"].includes(n))).toEqual([
      "envoy_quit_requested",
      "terminated",
    ]);
    expect(lc.events.filter((e) => e.event === "epoch_exit").map((e) => e.pid).sort()).toEqual(
      [parent.pid, child.pid].sort(),
    );
    expect(names(lc)).not.toContain("drain_resumed");
    expect(names(lc)).not.toContain("drain_fallback");
  });
});
