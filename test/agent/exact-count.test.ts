// The count is exact across workers: Envoy's, the filter's and the agent's counts agree at every
// step of a random drain.
import { writeFileSync } from "node:fs";
import { type ClientHttp2Session, connect } from "node:http2";
import { describe, expect, it, onTestFailed } from "vitest";
import type { Outcome } from "../filter/clients.ts";
import { agentCountAfterReports, envoyCounts } from "../support/counts.ts";
import { waitFor } from "../support/envoy.ts";
import { type HeldClient, heldId, holdHttp1, holdHttp2 } from "../support/held-clients.ts";
import {
  freePort,
  inboundConfig,
  isAlive,
  type LastcallEvent,
  startLastcall,
  type TestLastcall,
  writeConfig,
} from "../support/lastcall.ts";
import {
  type Random,
  randomBatches,
  seededRandom,
  shuffled,
  testSeed,
} from "../support/seeded-random.ts";
import { agentState, serving, upstreamForFile } from "../support/serving.ts";
import type { Json } from "../support/json.ts";

const app = upstreamForFile();

const names = (lc: TestLastcall) => lc.events.map((e) => e.event);
const ended = (lc: TestLastcall) =>
  names(lc).some((n) => n === "drain_wait_done" || n === "terminated");
const completed: Outcome = { status: 200, reset: false };

/** A seeded PRNG for this test; its seed is printed if the test fails. */
function randomForTest(): { seed: number; random: Random } {
  const seed = testSeed();
  onTestFailed(() => console.error(`exact-count: seed ${seed} (replay with TEST_SEED=${seed})`));
  return { seed, random: seededRandom(seed) };
}

/** Where the counts are read. */
interface Counted {
  lc: TestLastcall;
  status: string;
  /** Filter VMs that send heartbeats: each worker's and the main thread's, in every process. */
  vms: number;
}

/**
 * Waits until Envoy is quiescent with `expected` requests in flight (the app holds exactly those,
 * and Envoy's own count says so), then checks that Envoy's count and the filter's gauge, read
 * together, and the agent's count after a heartbeat all equal `expected`.
 */
async function countsAre(c: Counted, expected: number, step: string): Promise<void> {
  await app.until((a) => a.held === expected && a.inflight === expected);
  const admin = c.lc.adminUrl();
  await waitFor(async () => ((await envoyCounts(admin)).rqActive === expected ? true : undefined), {
    what: `Envoy's downstream_rq_active to be ${expected} (${step})`,
  });
  // Read again: Envoy lowers its count as a stream completes, the filter a moment later, as the
  // stream is deleted; by this second read the last stream to leave is gone from both.
  const envoy = await envoyCounts(admin);
  expect({ step, rqActive: envoy.rqActive, gauge: envoy.gauge }).toEqual({
    step,
    rqActive: expected,
    gauge: expected,
  });
  expect({ step, agent: await agentCountAfterReports(c.status, c.vms + 1) }).toEqual({
    step,
    agent: expected,
  });
}

/** Answers the held requests whose ids are in `ids`; resolves with their client outcomes. */
async function release(
  clients: Map<number, HeldClient>,
  ids: readonly number[],
): Promise<Outcome[]> {
  const set = new Set(ids);
  expect(app.releaseWhere((request) => set.has(heldId(request)))).toBe(ids.length);
  return await Promise.all(ids.map((id) => clients.get(id)!.outcome));
}

const TOTAL = 120;
const STEPS = 7;

describe("the count is exact across workers", () => {
  for (const concurrency of [1, 2, 4, 8]) {
    it(`--concurrency ${concurrency}: ${TOTAL} held requests released in random batches during a drain`, async () => {
      const { seed, random } = randomForTest();
      // Only the worker count differs from the defaults: it is what is tested.
      const { lc, port, status } = await serving(app.port, ["--concurrency", String(concurrency)]);
      const c: Counted = { lc, status, vms: concurrency + 1 };
      const clients = new Map<number, HeldClient>();
      for (let id = 0; id < TOTAL; id++) clients.set(id, holdHttp1(port, id));
      await countsAre(c, TOTAL, "all held");
      // The connections were spread over the workers (SO_REUSEPORT): each counts in one gauge.
      const { workers } = await envoyCounts(lc.adminUrl());
      console.log(
        `--concurrency ${concurrency}, seed ${seed}: connections per worker ${
          JSON.stringify(workers)
        }`,
      );
      expect(workers).toHaveLength(concurrency);
      expect(workers.reduce((a, b) => a + b, 0)).toBe(TOTAL);
      expect(workers.filter((n) => n > 0)).toHaveLength(concurrency);

      lc.signal("SIGTERM");
      await lc.event("listeners_draining");
      await countsAre(c, TOTAL, "draining, all held");
      const batches = randomBatches(shuffled([...clients.keys()], random), STEPS, random);
      let left = TOTAL;
      for (const [step, batch] of batches.slice(0, -1).entries()) {
        expect(await release(clients, batch)).toEqual(batch.map(() => completed));
        left -= batch.length;
        await countsAre(c, left, `step ${step + 1}/${STEPS}: released ${batch.length}`);
        // Requests are still held: the drain goes on.
        expect(ended(lc)).toBe(false);
        expect(isAlive(lc.pid)).toBe(true);
      }

      const last = batches.at(-1)!;
      const eventsBefore = lc.events.length;
      const releasedAt = Date.now();
      expect(await release(clients, last)).toEqual(last.map(() => completed));
      const terminated = await lc.event("terminated");
      expect(await lc.exited).toEqual({ code: 0, signal: null });
      expect(terminated).toMatchObject({
        mode: "inflight",
        reason: "inflight_zero",
        inflight_at_stop: 0,
      });
      // Nothing ended the drain before the last release; right after it, the drain ended.
      const done = await lc.event("drain_wait_done");
      expect(done).toMatchObject({ reason: "inflight_zero" });
      expect(lc.events.indexOf(done)).toBeGreaterThanOrEqual(eventsBefore);
      expect(Date.parse(done.ts)).toBeGreaterThanOrEqual(releasedAt);
      const after = names(lc).slice(eventsBefore);
      console.log(`--concurrency ${concurrency}: after the last release: ${after.join(", ")}`);
      expect(
        after.filter((n) => ["drain_wait_done", "envoy_quit_requested", "terminated"].includes(n)),
      )
        .toEqual(["drain_wait_done", "envoy_quit_requested", "terminated"]);
      // No second read found a request after a pulled zero; the floor (--min-drain 5s) had passed
      // (each step waits a heartbeat), so nothing but the count held the end back.
      expect(names(lc)).not.toContain("drain_resumed");
      expect(names(lc)).not.toContain("min_drain_wait");
      expect(names(lc)).not.toContain("drain_fallback");
    });
  }
});

/** Opens an HTTP/2 cleartext session with prior knowledge; errors after it opened are ignored (a GOAWAY). */
function h2(port: number): Promise<ClientHttp2Session> {
  return new Promise((done, fail) => {
    const session = connect(`http://127.0.0.1:${port}`);
    session.once("connect", () => {
      session.off("error", fail);
      session.on("error", () => {});
      done(session);
    });
    session.once("error", fail);
  });
}

/** Takes `n` ids from `pool` at random (removing them). */
function take(pool: number[], n: number, random: Random): number[] {
  const picked = shuffled(pool, random).slice(0, n);
  for (const id of picked) pool.splice(pool.indexOf(id), 1);
  return picked;
}

describe("client aborts and resets during a drain", () => {
  it("counts drop by exactly the aborted requests (HTTP/1.1 socket closed, HTTP/2 RST_STREAM, HTTP/2 session gone), and the drain ends after the rest", async () => {
    const { seed, random } = randomForTest();
    const { lc, port, status } = await serving(app.port, []); // lastcall's defaults
    const c: Counted = { lc, status, vms: 2 + 1 };
    const sessions = await Promise.all([h2(port), h2(port), h2(port)]);
    const clients = new Map<number, HeldClient>();
    const h1: number[] = [];
    const h2Streams: number[][] = sessions.map(() => []);
    for (let id = 0; id < 12; id++) {
      clients.set(id, holdHttp1(port, id));
      h1.push(id);
    }
    for (let id = 12; id < 24; id++) {
      const s = id % sessions.length;
      clients.set(id, holdHttp2(sessions[s]!, id));
      h2Streams[s]!.push(id);
    }
    let left = 24;
    await countsAre(c, left, "all held");

    lc.signal("SIGTERM");
    await lc.event("listeners_draining");
    await countsAre(c, left, "draining, all held");
    const outcomes = async (ids: readonly number[]) =>
      await Promise.all(ids.map((id) => clients.get(id)!.outcome));

    // HTTP/1.1: the client closes the connection of 4 held requests.
    const closed = take(h1, 4, random);
    for (const id of closed) clients.get(id)!.abort();
    expect(await outcomes(closed)).toEqual(closed.map(() => ({ status: undefined, reset: true })));
    left -= closed.length;
    await countsAre(c, left, `HTTP/1.1 sockets closed: ${closed.join(", ")}`);
    expect(ended(lc)).toBe(false);

    // HTTP/2: the client resets 2 streams on each of two sessions; their sessions stay open.
    const reset = [...take(h2Streams[0]!, 2, random), ...take(h2Streams[1]!, 2, random)];
    for (const id of reset) clients.get(id)!.abort();
    expect(await outcomes(reset)).toEqual(reset.map(() => ({ status: undefined, reset: true })));
    left -= reset.length;
    await countsAre(c, left, `HTTP/2 streams reset: ${reset.join(", ")}`);
    expect(ended(lc)).toBe(false);

    // Some are answered meanwhile.
    const answered = [...take(h1, 3, random), ...take(h2Streams[0]!, 1, random)];
    expect(await release(clients, answered)).toEqual(answered.map(() => completed));
    left -= answered.length;
    await countsAre(c, left, `answered: ${answered.join(", ")}`);
    expect(ended(lc)).toBe(false);

    // The third session goes away with its streams (the client closes the connection).
    const gone = h2Streams[2]!.splice(0);
    sessions[2]!.destroy();
    expect(await outcomes(gone)).toEqual(gone.map(() => ({ status: undefined, reset: true })));
    left -= gone.length;
    await countsAre(c, left, `HTTP/2 session closed with ${gone.join(", ")}`);
    expect(ended(lc)).toBe(false);

    // The rest finish, in random order: the drain ends after the last one, on a counted zero.
    const rest = shuffled([...h1, ...h2Streams[0]!, ...h2Streams[1]!], random);
    expect(rest).toHaveLength(left);
    const [first, second] = randomBatches(rest, 2, random);
    expect(await release(clients, first!)).toEqual(first!.map(() => completed));
    left -= first!.length;
    await countsAre(c, left, `answered: ${first!.join(", ")}`);
    expect(ended(lc)).toBe(false);
    const eventsBefore = lc.events.length;
    const releasedAt = Date.now();
    expect(await release(clients, second!)).toEqual(second!.map(() => completed));
    const done = await lc.event("drain_wait_done");
    expect(done).toMatchObject({ reason: "inflight_zero" });
    expect(lc.events.indexOf(done)).toBeGreaterThanOrEqual(eventsBefore);
    expect(Date.parse(done.ts)).toBeGreaterThanOrEqual(releasedAt);
    expect(await lc.event("terminated")).toMatchObject({
      mode: "inflight",
      reason: "inflight_zero",
      inflight_at_stop: 0,
    });
    expect(await lc.exited).toEqual({ code: 0, signal: null });
    console.log(
      `aborts, seed ${seed}: closed ${closed}, reset ${reset}, answered ${answered}, session gone ${gone}, then ${first} and ${second}`,
    );
    for (const session of sessions) session.destroy();
  });
});

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
      // A process at zero answers a probe for each of its heartbeats (the agent pulls on every
      // zero hint while it waits): up to two reports per VM per period, so twice the VMs, and one.
      const reports = 2 * counted.vms + 1;
      expect({ step, agent: await agentCountAfterReports(status, reports) }).toEqual({
        step,
        agent: parentLeft + childLeft,
      });
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
