// The L4 variant under the agent: an inbound tcp_proxy listener gets the connection-counting
// filter, and the drain waits for an open TCP connection, not just for HTTP requests.
import { connect, type Socket } from "node:net";
import { afterAll, afterEach, beforeAll, expect, it } from "vitest";
import { tcpProxyConfig } from "../support/envoy-bootstrap.ts";
import { waitFor } from "../support/envoy.ts";
import { startLastcall, stopAllLastcalls } from "../support/lastcall.ts";
import { startUpstreamApp, type UpstreamApp } from "../support/upstream-app.ts";

let app: UpstreamApp;
beforeAll(async () => (app = await startUpstreamApp()));
afterAll(() => app.close());
afterEach(stopAllLastcalls);

async function agentInflight(statusUrl: string, expected: number): Promise<void> {
  await waitFor(async () => {
    const state = await (await fetch(`${statusUrl}/v1/state`)).json() as { inflight: number };
    return state.inflight === expected ? true : undefined;
  }, { what: `the agent to see ${expected} in flight`, timeoutMs: 15_000 });
}

it("counts an open TCP connection through tcp_proxy and drains until it closes", async () => {
  const lc = startLastcall(tcpProxyConfig(app.port), {
    args: ["--min-drain", "0s", "--heartbeat", "200ms"],
  });
  const start = await lc.event("start");
  expect(start.filter_tcp).toEqual(["tcp_in"]);
  await lc.event("ready");
  const statusUrl = await lc.statusUrl();
  const port = await lc.listenerPort("tcp_in");

  const socket: Socket = connect(port, "127.0.0.1");
  await new Promise<void>((resolve, reject) =>
    socket.once("connect", resolve).once("error", reject)
  );
  // An HTTP exchange through the TCP tunnel proves the bytes flow; the connection stays open.
  socket.write("GET / HTTP/1.1\r\nhost: app\r\n\r\n");
  await new Promise<void>((resolve) => socket.once("data", () => resolve()));
  await agentInflight(statusUrl, 1);

  lc.signal("SIGTERM");
  await lc.event("listeners_draining");
  expect(lc.events.some((e) => e.event === "drain_wait_done")).toBe(false);
  socket.end();
  expect(await lc.event("terminated")).toMatchObject({
    reason: "inflight_zero",
    inflight_at_stop: 0,
  });
  expect(await lc.exited).toEqual({ code: 0, signal: null });
  // The drain ended only after the connection closed.
  const names = lc.events.map((e) => e.event);
  expect(names.indexOf("drain_wait_done")).toBeGreaterThan(names.indexOf("listeners_draining"));
});
