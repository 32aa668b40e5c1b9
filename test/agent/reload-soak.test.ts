// Hot reloads under load lose nothing: keep-alive pools (as Node's and browsers' are) leave idle
// connections in an old epoch that may carry a request long after the epoch finished the rest;
// the epoch closes them, and is ended only once it holds none.
import { Agent, request } from "node:http";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../support/envoy.ts";
import {
  freePort,
  inboundConfig,
  type LastcallEvent,
  startLastcall,
  stopAllLastcalls,
} from "../support/lastcall.ts";
import { startUpstreamApp, type UpstreamApp } from "../support/upstream-app.ts";
import type { Json } from "../support/json.ts";

let app: UpstreamApp;
beforeAll(async () => (app = await startUpstreamApp()));
afterAll(() => app.close());
afterEach(stopAllLastcalls);

const BIG = 8_000_000;

/** GETs sent again: Envoy closed their reused connection before the request reached the app. */
let retried = 0;
let sent = 0;

/**
 * GETs `path` through `agent`, reading the body at `bytesPerSecond` at most; resolves with the
 * body length, rejects on any socket error or a body shorter than announced. Like browsers, curl
 * and Go (RFC 9112 §9.3.1; Node's `reusedSocket`), a GET whose reused idle connection was closed
 * before any answer is sent once more, but only when it never reached the app: an idle connection
 * closed by Envoy's idle timeout can meet a request on its way. One the app saw and whose answer
 * was lost or cut is a failure.
 */
async function get(
  port: number,
  path: string,
  agent: Agent,
  bytesPerSecond = Infinity,
): Promise<number> {
  const url = `${path}${path.includes("?") ? "&" : "?"}request=${++sent}`;
  try {
    return await getOnce(port, url, agent, bytesPerSecond);
  } catch (error) {
    if (!(error instanceof ClosedBeforeAnswer) || app.saw(url)) throw error;
    retried++;
    return await getOnce(port, url, agent, bytesPerSecond);
  }
}

class ClosedBeforeAnswer extends Error {}

function getOnce(
  port: number,
  path: string,
  agent: Agent,
  bytesPerSecond: number,
): Promise<number> {
  return new Promise((resolve, reject) => {
    let answered = false;
    const req = request({ host: "127.0.0.1", port, path, agent }, (response) => {
      answered = true;
      const startedAt = Date.now();
      let received = 0;
      response.on("data", (chunk: Buffer) => {
        received += chunk.length;
        const aheadMs = (received / bytesPerSecond) * 1000 - (Date.now() - startedAt);
        if (aheadMs > 5) {
          response.pause();
          setTimeout(() => response.resume(), aheadMs);
        }
      });
      response.on("end", () => {
        const expected = Number(response.headers["content-length"] ?? -1);
        if (response.statusCode !== 200) reject(new Error(`status ${response.statusCode}`));
        else if (expected >= 0 && received !== expected) {
          reject(new Error(`${received} of ${expected} bytes`));
        } else resolve(received);
      });
      response.on("error", reject);
    });
    req.on(
      "error",
      (error) =>
        reject(!answered && req.reusedSocket ? new ClosedBeforeAnswer(error.message) : error),
    );
    req.end();
  });
}

describe("hot reloads under load", () => {
  it("a pooled connection idle in a finished parent carries no download into the next reload", async () => {
    const port = await freePort();
    const config = inboundConfig({ upstreamPort: app.port }) as Json;
    config.static_resources.listeners[0].address.socket_address.port_value = port; // a hot restart hands sockets over by address
    const lc = startLastcall(config, {});
    const first = await lc.event("ready");
    const pool = new Agent({ keepAlive: true, maxSockets: 1 });
    try {
      await get(port, "/", pool); // its connection to epoch 0 waits in the pool
      lc.signal("SIGHUP");
      expect(await lc.event("epoch_draining")).toMatchObject({
        epochs: [0],
        kind: "hot",
        idle_connections: "closing",
      });
      expect(await lc.event("epoch_drained", (e) => (e.epochs as number[]).includes(0)))
        .toMatchObject({ reason: "inflight_zero", inflight_at_stop: 0, bytes_unsent_at_stop: 0 });
      // The pool's next request; the next reload's child ends epoch 0 while it is read.
      const download = get(port, `/bytes?n=${BIG}`, pool, 2_000_000);
      await app.until((a) => a.inflight === 1);
      lc.signal("SIGHUP");
      expect(await download).toBe(BIG);
      expect(await lc.event("epoch_exit", (e) => e.pid === first.pid)).toMatchObject({
        epoch: 0,
        inflight_at_stop: 0,
        bytes_unsent_at_stop: 0,
      });
    } finally {
      pool.destroy();
    }
  });

  it(
    "12 SIGHUPs 1.5 s apart under fast, slow and slow-reading keep-alive clients: 0 failed, every body whole",
    async () => {
      const port = await freePort();
      const config = inboundConfig({ upstreamPort: app.port }) as Json;
      config.static_resources.listeners[0].address.socket_address.port_value = port; // a hot restart hands sockets over by address
      const lc = startLastcall(config, {});
      await lc.event("ready");
      const failures: string[] = [];
      let ok = 0;
      retried = 0;
      const count = (what: string) => (p: Promise<number>) =>
        p.then(() => void ok++, (e: Error) => void failures.push(`${what}: ${e.message}`));
      let running = true;
      const agents = Array.from({ length: 8 }, () => new Agent({ keepAlive: true, maxSockets: 1 }));
      const pool = new Agent({ keepAlive: true });
      const fast = agents.map(async (agent) => {
        while (running) await count("fast")(get(port, "/", agent));
      });
      const started: Promise<void>[] = [];
      const timers = [
        setInterval(() => started.push(count("3 s")(get(port, "/delay?ms=3000", pool))), 300),
        setInterval(
          () =>
            started.push(count("8 MB at 2 MB/s")(get(port, `/bytes?n=${BIG}`, pool, 2_000_000))),
          2000,
        ),
      ];
      try {
        for (let reload = 1; reload <= 12; reload++) {
          await new Promise((done) => setTimeout(done, 1500));
          lc.signal("SIGHUP");
        }
        // Each SIGHUP is a reload or joins one that waits its turn; the last one's epoch serves.
        const heard = (e: LastcallEvent) => e.event === "reload" || e.event === "reload_coalesced";
        await waitFor(() => (lc.events.filter(heard).length === 12 ? true : undefined), {
          what: "lastcall to take the 12 SIGHUPs",
        });
        const reloads = lc.events.filter((e) => e.event === "reload").length;
        await lc.event("ready", (e) => e.epoch === reloads, 60_000);
      } finally {
        for (const timer of timers) clearInterval(timer);
        running = false;
      }
      await Promise.all([...fast, ...started]);
      for (const agent of [...agents, pool]) agent.destroy();
      console.log(
        `12 reloads under load: ${ok} ok, ${failures.length} failed, ${retried} sent again`,
      );
      expect(failures).toEqual([]);
      const exits = lc.events.filter((e) => e.event === "epoch_exit");
      expect(exits.length).toBeGreaterThan(0);
      for (const exit of exits) {
        expect(exit).toMatchObject({
          drain_reason: "inflight_zero",
          inflight_at_stop: 0,
          bytes_unsent_at_stop: 0,
        });
      }
    },
    120_000,
  );
});
