// An app container's readiness probe in a classic pod (`GET /v1/app-ready`, what inject writes):
// real lastcall, real Envoy, a real app, on the defaults. The probe waits for a starting Envoy,
// then asks the app's path through the listener, and fails once lastcall stops taking inbound.
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, expect, it, onTestFinished } from "vitest";
import { freePort, inboundConfig, startLastcall } from "../support/lastcall.ts";
import { serving } from "../support/serving.ts";

/** An app whose `/ready` answers `status`, `/hang` never; it keeps the last request's headers. */
async function startApp() {
  const app = {
    status: 200,
    headers: undefined as IncomingHttpHeaders | undefined,
    port: 0,
    close() {
      server.closeAllConnections();
      server.close();
    },
  };
  const server: Server = createServer((req, res) => {
    app.headers = req.headers;
    if (req.url === "/hang") return;
    res.statusCode = req.url?.startsWith("/ready") ? app.status : 404;
    res.end();
  });
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  app.port = (server.address() as AddressInfo).port;
  onTestFinished(() => app.close());
  return app;
}

/** The kubelet's probe: a GET with its user agent and the probe's `httpHeaders`. */
async function probe(status: string, query: string): Promise<{ code: number; body: Json }> {
  const response = await fetch(`${status}/v1/app-ready?${query}`, {
    headers: { "user-agent": "kube-probe/1.34", "x-probe": "yes" },
  });
  return { code: response.status, body: await response.json() as Json };
}

type Json = Record<string, unknown>;

describe("GET /v1/app-ready (a classic pod's app probe)", () => {
  it("sent before Envoy serves, waits for it and answers what the app answered through the listener, with the probe's headers", async () => {
    const app = await startApp();
    const config = inboundConfig({ upstreamPort: app.port }) as {
      static_resources: { listeners: Array<{ address: { socket_address: Json } }> };
    };
    const listener = await freePort();
    config.static_resources.listeners[0].address.socket_address.port_value = listener;
    const lc = startLastcall(config);
    const status = await lc.statusUrl();
    // Asked before lastcall said Envoy was ready: the status port is bound first, and waits.
    const readyBefore = lc.events.some((e) => e.event === "ready");
    const answer = await probe(status, `port=${listener}&path=/ready&timeout_ms=3000`);
    expect(readyBefore).toBe(false);
    expect(answer).toEqual({
      code: 200,
      body: {
        ready: true,
        reason: `the app answered 200 through Envoy's listener ${listener}`,
        status: 200,
      },
    });
    expect(app.headers).toMatchObject({ "user-agent": "kube-probe/1.34", "x-probe": "yes" });
    // Through Envoy: its router adds these.
    expect(app.headers).toHaveProperty("x-request-id");
    expect(app.headers).toHaveProperty("x-forwarded-proto", "http");
  });

  it("fails with the app's own failure: an answer of 500, an app that is down, no answer within the timeout", async () => {
    const app = await startApp();
    const { port, status } = await serving(app.port, []);
    app.status = 500;
    expect(await probe(status, `port=${port}&path=/ready`)).toMatchObject({
      code: 503,
      body: { ready: false, reason: `the app answered 500 through Envoy's listener ${port}` },
    });
    const asked = Date.now();
    const hung = await probe(status, `port=${port}&path=/hang&timeout_ms=500`);
    // Answered before the kubelet's own timeout would have cut it.
    expect(Date.now() - asked).toBeLessThan(500);
    expect(hung).toMatchObject({ code: 503, body: { ready: false } });
    expect(hung.body.reason).toMatch(new RegExp(`^through Envoy's listener ${port}: no answer`));
    app.status = 200;
    expect((await probe(status, `port=${port}&path=/ready`)).code).toBe(200);
    app.close();
    // Envoy answers for an app it cannot reach.
    expect(await probe(status, `port=${port}&path=/ready`)).toMatchObject({
      code: 503,
      body: { ready: false, reason: `the app answered 503 through Envoy's listener ${port}` },
    });
  });

  it("refuses a port that is no inbound listener of Envoy (naming those), and a bad query (naming the value)", async () => {
    const app = await startApp();
    const { port, status } = await serving(app.port, []);
    expect(await probe(status, `port=${app.port}&path=/ready`)).toEqual({
      code: 503,
      body: {
        ready: false,
        reason: `port ${app.port} is not an inbound listener of Envoy (those are ${port})`,
      },
    });
    expect(app.headers).toBeUndefined();
    for (
      const [query, error] of [
        ["path=/ready", "port null is not a TCP port from 1 to 65535"],
        [`port=70000`, 'port "70000" is not a TCP port from 1 to 65535'],
        [`port=${port}&path=ready`, 'path "ready" does not start with / (or is over 2048 bytes)'],
        [
          `port=${port}&timeout_ms=50`,
          'timeout_ms "50" is not a whole number of milliseconds from 100 to 600000',
        ],
      ]
    ) {
      expect(await probe(status, query)).toEqual({ code: 400, body: { error } });
    }
  });

  it("during a drain, passes while Envoy takes inbound requests, and fails once the app's preStop closed them", async () => {
    const app = await startApp();
    const { lc, port, status } = await serving(app.port, []);
    lc.signal("SIGTERM");
    await lc.event("drain_start");
    expect((await probe(status, `port=${port}&path=/ready`)).code).toBe(200);
    // The app's preStop returns once the inbound side is quiet past the floor, and closes it.
    const stopped = await (await fetch(`${status}/v1/app-stop`)).json();
    expect(stopped).toMatchObject({ inbound_closed: true });
    const closed = await probe(status, `port=${port}&path=/ready`);
    expect(closed.code).toBe(503);
  });
});
