// `/v1/app-ready`'s clock: the probe's timeout runs from its arrival at the status server (a
// request held until the agent is warm has already used part of it), never from the handler.
import type { IncomingMessage } from "node:http";
import { Hono } from "hono";
import { describe, expect, it, vi } from "vitest";
import { appReady } from "../../agent/status/app-ready.ts";
import { arrivedAt, bindStatus } from "../../agent/status/listen.ts";

describe("the app probe's deadline", () => {
  it("a probe that arrived longer ago than its timeout waits for nothing and asks no one", async () => {
    const ready = vi.fn(() => Promise.resolve({ ready: false, reason: "Envoy not started" }));
    const inboundPorts = vi.fn(() => Promise.resolve([18080]));
    const query = { port: 18080, path: "/", timeoutMs: 1000, askedAt: Date.now() - 2000 };
    expect(await appReady({ ready, inboundPorts }, query, {})).toEqual({
      ready: false,
      reason: "Envoy not started",
    });
    expect(ready).toHaveBeenCalledWith(0);
    expect(inboundPorts).not.toHaveBeenCalled();
  });

  it("waits for Envoy until 50 ms before the timeout, counted from the arrival", async () => {
    const ready = vi.fn((_waitMs: number) => Promise.resolve({ ready: false, reason: "starting" }));
    const askedAt = Date.now() - 300;
    await appReady({ ready, inboundPorts: () => Promise.resolve([]) }, {
      port: 18080,
      path: "/",
      timeoutMs: 1000,
      askedAt,
    }, {});
    const waited = ready.mock.calls[0][0];
    expect(waited).toBeGreaterThan(0);
    expect(waited).toBeLessThanOrEqual(650);
  });

  it("the status server stamps each request it takes, held ones too; one not through it has none", async () => {
    const server = await bindStatus("127.0.0.1", 0, { held: true });
    const sent = Date.now();
    const app = new Hono().get("/", (c) => {
      const at = arrivedAt((c.env as { incoming?: IncomingMessage }).incoming);
      return c.json({ at, seen: Date.now() });
    });
    const answer = fetch(`http://127.0.0.1:${server.port}/`).then((r) => r.json());
    server.serve(app);
    await server.warm();
    const { at, seen } = await answer as { at: number; seen: number };
    expect(at).toBeGreaterThanOrEqual(sent);
    expect(at).toBeLessThanOrEqual(seen);
    expect(arrivedAt(undefined)).toBeUndefined();
    await server.close();
  });
});
