// The app's preStop ends a proxy left with nothing to do on every listener kind, not only a TCP
// HTTP listener: a slow reader on a unix-socket listener and one through a tcp_proxy listener get
// every byte, and the hook answers once Envoy has stopped after them. Real Envoy, real lastcall,
// the defaults (--min-drain 5s); the pod's end as the native sidecar's preStop starts it.
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { tcpProxyConfig } from "../support/envoy-bootstrap.ts";
import { inboundConfig, runLastcall, type TestLastcall } from "../support/lastcall.ts";
import { serving, upstreamForFile } from "../support/serving.ts";
import { type SlowDownload, slowDownload } from "../support/slow-reader.ts";
import { tempDir } from "../support/temp.ts";
import { BODY, RATE } from "./delivery-support.ts";
import { appStop, order } from "./app-stop-support.ts";

const app = upstreamForFile();

/** The pod's end under a slow reader: the sidecar's preStop, then the app's; every byte read. */
async function podEndsUnder(lc: TestLastcall, status: string, download: SlowDownload) {
  await download.reached(RATE);
  expect((await runLastcall(["drain", "--status-url", status])).code).toBe(0);
  const answer = await appStop(status);
  expect(answer).toMatchObject({ reason: "quiet", inbound_closed: true, envoy_stopped: true });
  expect(await download.done).toEqual({
    status: 200,
    expected: BODY,
    received: BODY,
    endedBy: "fin",
  });
  expect(await lc.event("terminate")).toMatchObject({ source: "app-stop" });
  expect(await lc.event("terminated")).toMatchObject({
    inflight_at_stop: 0,
    bytes_unsent_at_stop: 0,
  });
  // The answer came once Envoy had stopped, which it did only with every byte delivered.
  expect(order(lc, "app_stop")).toBeGreaterThan(order(lc, "envoy_quit_requested"));
  expect(await lc.exited).toEqual({ code: 0, signal: null });
}

describe("the app's preStop on other listener kinds, once every byte is delivered", () => {
  it("a unix-socket HTTP listener: a slow reader gets every byte; the hook answers after Envoy's stop", async () => {
    const path = join(tempDir("lastcall-pipe-"), "in.sock");
    const config = inboundConfig({ upstreamPort: app.port }) as {
      static_resources: { listeners: Array<Record<string, unknown>> };
    };
    config.static_resources.listeners[0].address = { pipe: { path } };
    // No port to wait for: the listener is a path.
    const { lc, status } = await serving(app.port, [], { config, listener: null });
    await podEndsUnder(lc, status, slowDownload({ path }, `/bytes?n=${BODY}`, RATE));
  });

  it("a tcp_proxy listener: a slow reader through it gets every byte; the hook answers after Envoy's stop", async () => {
    const { lc, port, status } = await serving(app.port, [], {
      config: tcpProxyConfig(app.port),
      listener: "tcp_in",
    });
    await podEndsUnder(lc, status, slowDownload(port, `/bytes?n=${BODY}`, RATE));
  });
});
