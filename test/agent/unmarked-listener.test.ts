// A listener without `traffic_direction` is counted and drained like an INBOUND one, static or from
// an LDS file.
import { writeFileSync } from "node:fs";
import { request } from "node:http";
import { join } from "node:path";
import { expect, it } from "vitest";
import { http1 } from "../filter/clients.ts";
import { localCluster } from "../support/envoy-bootstrap.ts";
import { waitFor } from "../support/envoy.ts";
import {
  inboundConfig,
  type LastcallEvent,
  startLastcall,
  type TestLastcall,
  writeConfig,
} from "../support/lastcall.ts";
import { agentSees, agentState, upstreamForFile } from "../support/serving.ts";
import { tempDir } from "../support/temp.ts";

const app = upstreamForFile();
const HCM =
  "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
const LISTENER = "type.googleapis.com/envoy.config.listener.v3.Listener";
const time = (e: LastcallEvent) => Date.parse(e.ts);

/** A listener in front of cluster `app`, with no traffic_direction unless given. */
function listener(name: string, direction?: string): Record<string, unknown> {
  return {
    name,
    ...(direction ? { traffic_direction: direction } : {}),
    address: { socket_address: { address: "127.0.0.1", port_value: 0 } },
    filter_chains: [{
      filters: [{
        name: "envoy.filters.network.http_connection_manager",
        typed_config: {
          "@type": HCM,
          stat_prefix: name,
          route_config: {
            virtual_hosts: [{
              name: "app",
              domains: ["*"],
              routes: [{ match: { prefix: "/" }, route: { cluster: "app", timeout: "0s" } }],
            }],
          },
          http_filters: [{
            name: "envoy.filters.http.router",
            typed_config: {
              "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router",
            },
          }],
        },
      }],
    }],
  };
}

/** The `connection` header of one keep-alive HTTP/1.1 answer (Envoy says `close` on a draining listener). */
function connectionHeader(port: number): Promise<string | undefined> {
  return new Promise((done, fail) => {
    const req = request({
      host: "127.0.0.1",
      port,
      path: "/",
      agent: false,
      headers: { connection: "keep-alive" },
    }, (response) => {
      response.resume();
      response.on("end", () => {
        done(response.headers.connection);
        req.destroy();
      });
    });
    req.on("error", fail);
    req.end();
  });
}

/**
 * Holds one request on `port` across SIGTERM on the defaults: the agent counts it, the listener
 * drains (Connection: close), the floor passes with the request still held, then it is released
 * and answered, and the drain ends on the confirmed zero after it.
 */
async function heldPastTheFloor(lc: TestLastcall, port: number): Promise<void> {
  const status = await lc.statusUrl();
  await waitFor(
    async () => ((await agentState(status)).filter === "reporting" ? true : undefined),
    { what: "the filter's first report" },
  );
  expect(await connectionHeader(port)).toBeUndefined(); // not draining yet
  const held = http1(port, "/hold");
  await app.until((a) => a.held === 1);
  await agentSees(status, 1); // counted: the filter is in the unmarked listener
  lc.signal("SIGTERM");
  const drainStart = await lc.event("drain_start");
  await lc.event("listeners_draining");
  // Drained like the INBOUND listener: Envoy's inbound-only drain reaches it.
  expect(await connectionHeader(port)).toBe("close");
  const floorEnd = time(drainStart) + Number(drainStart.min_drain_ms);
  await new Promise((done) => setTimeout(done, Math.max(0, floorEnd - Date.now() + 300)));
  expect(lc.events.map((e) => e.event)).not.toContain("drain_wait_done"); // past the floor, still held
  const releasedAt = Date.now();
  app.release();
  expect(await held).toEqual({ status: 200, reset: false });
  expect(await lc.event("terminated")).toMatchObject({
    reason: "inflight_zero",
    inflight_at_stop: 0,
  });
  expect(time(await lc.event("drain_wait_done"))).toBeGreaterThanOrEqual(releasedAt - 5);
  expect(await lc.exited).toEqual({ code: 0, signal: null });
}

it("a static listener with no traffic_direction beside an INBOUND one: named in `start`, counted, drained, its request answered", async () => {
  const config = inboundConfig({ upstreamPort: app.port }) as {
    static_resources: { listeners: unknown[] };
  };
  config.static_resources.listeners.push(listener("plain"));
  const lc = startLastcall(config); // lastcall's defaults
  const start = await lc.event("start");
  expect(start).toMatchObject({ filter: ["ingress", "plain"], inbound: ["ingress", "plain"] });
  expect(start.listeners).toEqual([
    { name: "ingress", direction: "INBOUND", counted: "filter", delivery: "tcp_queue" },
    { name: "plain", direction: "unmarked", counted: "filter", delivery: "tcp_queue" },
  ]);
  await lc.event("ready");
  await heldPastTheFloor(lc, await lc.listenerPort("plain"));
});

it("an LDS listener from a file with no traffic_direction beside an INBOUND one: named in `xds_listeners`, counted, drained, answered", async () => {
  const dir = tempDir("lastcall-lds-");
  const ldsPath = join(dir, "lds.json");
  writeFileSync(
    ldsPath,
    JSON.stringify({
      resources: [{ "@type": LISTENER, ...listener("ingress", "INBOUND") }, {
        "@type": LISTENER,
        ...listener("plain"),
      }],
    }),
  );
  const lc = startLastcall(writeConfig({
    node: { id: "lastcall-test", cluster: "test" },
    dynamic_resources: {
      lds_config: { resource_api_version: "V3", path_config_source: { path: ldsPath } },
    },
    static_resources: { clusters: [localCluster("app", app.port)] },
  }, dir));
  expect(await lc.event("xds_listeners")).toMatchObject({
    service: "file",
    filtered: ["ingress", "plain"],
    counted: [{ name: "ingress", direction: "INBOUND", counted: "filter" }, {
      name: "plain",
      direction: "unmarked",
      counted: "filter",
    }],
  });
  await lc.event("ready");
  const port = await waitFor(async () => await lc.listenerPort("plain").catch(() => undefined), {
    what: "the file's listener",
  });
  await heldPastTheFloor(lc, port);
  expect(lc.events.map((e) => e.event)).not.toContain("drain_fallback");
});
