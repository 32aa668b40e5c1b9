// The count is exact across workers: Envoy's, the filter's and the agent's counts agree at every
// step of a random drain, and clients that abort or reset mid-drain are counted out exactly once.
// The same across a hot restart: exact-count-hot-restart.test.ts.
import { type ClientHttp2Session, connect } from "node:http2";
import { describe, expect, it } from "vitest";
import { envoyCounts } from "../support/counts.ts";
import { type HeldClient, holdHttp1, holdHttp2 } from "../support/held-clients.ts";
import { isAlive } from "../support/lastcall.ts";
import { type Random, randomBatches, shuffled } from "../support/seeded-random.ts";
import { serving, upstreamForFile } from "../support/serving.ts";
import { completed, countChecks, type Counted, randomForTest } from "./exact-count-support.ts";
import { ended, names } from "./termination-support.ts";

const app = upstreamForFile();
const { countsAre, release } = countChecks(app);

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
