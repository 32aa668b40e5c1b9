// lastcall serves Envoy's ADS/LDS stream itself and relays it to a real control plane
// (go-control-plane), inserting the filter into every listener: requests through an LDS
// listener are counted exactly, and a drain ends on the filter's confirmed zero.
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { wasmFilter } from "../../agent/envoy/bootstrap.ts";
import { waitFor } from "../support/envoy.ts";
import { freePort, startLastcall } from "../support/lastcall.ts";
import { upstreamForFile } from "../support/serving.ts";
import { buildXdsServer, startXdsServer, stopAllXdsServers } from "../support/xds-server/index.ts";
import {
  basicSnapshot,
  dumpedHttpFilters,
  envoyStat,
  get,
  inflightGauge,
  xdsBootstrap,
  type XdsService,
  type XdsVariant,
} from "./resources.ts";

const app = upstreamForFile();
// A first build of the control plane downloads go-control-plane and compiles it: minutes.
beforeAll(() => void buildXdsServer(), 300_000);
afterEach(() => stopAllXdsServers());

describe.each<[XdsService, XdsVariant]>([["ads", "sotw"], ["ads", "delta"], ["lds", "sotw"], [
  "lds",
  "delta",
]])("%s (%s)", (service, variant) => {
  it("inserts the filter into LDS listeners, counts their requests, and drains to the pushed zero", async () => {
    const cp = await startXdsServer();
    const listenerPort = await freePort();
    await cp.push({
      ...basicSnapshot({ version: "1", listenerPort, appPort: app.port, service, variant }),
      unknown_fields: true,
    });
    const lc = startLastcall(xdsBootstrap({ xdsPort: cp.port, service, variant }), {
      args: ["--min-drain", "0s", "--grace", "30s"],
    });
    const start = await lc.event("start");
    expect(start.xds).toHaveLength(1);
    expect(start.counted_by_stats).toBeUndefined();
    await lc.event("ready");
    const listed = await lc.event("xds_listeners");
    expect(listed.filtered).toEqual(["ingress"]);

    // LIVE comes as the listener is handed to the workers: the first connection may be a moment later.
    const ok = await waitFor(
      async () => (await get(listenerPort, "/delay?ms=1").catch(() => undefined)),
      { what: "the LDS listener to answer" },
    );
    expect(ok.status).toBe(200);
    expect(ok.headers["x-version"]).toBe("1");
    const admin = lc.adminUrl();
    const [filters] = await dumpedHttpFilters(admin, "ingress");
    expect(filters.map((f) => f.name)).toEqual(["lastcall_inflight", "envoy.filters.http.router"]);
    const plugin = JSON.parse(filters[0].typed_config.config.configuration.value);
    expect(plugin.instance).toMatch(/^\d+-1-0$/);
    // Exactly the filter a static listener gets: Envoy decoded lastcall's protobuf to the same JSON.
    expect(filters[0]).toEqual(
      wasmFilter({
        wasmPath: filters[0].typed_config.config.vm_config.code.local.filename,
        pluginConfig: plugin,
      }),
    );
    // The unknown fields the control plane put in the listener, chain, filter and HCM reached Envoy.
    expect(await envoyStat(admin, "server.dynamic_unknown_fields")).toBeGreaterThanOrEqual(4);

    const held = get(listenerPort, "/hold");
    await app.until((a) => a.held === 1);
    expect(await inflightGauge(admin)).toBe(1);

    lc.signal("SIGTERM");
    await lc.event("drain_start");
    // The filter's reports for this LDS listener are expected: the drain waits on them.
    await waitFor(
      () => (lc.events.some((e) => e.event === "drain_fallback")
        ? "fallback"
        : app.held === 1
        ? "holding"
        : undefined),
      { what: "the drain to hold" },
    );
    app.release();
    expect((await held).status).toBe(200);
    const terminated = await lc.event("terminated");
    expect(terminated.reason).toBe("inflight_zero");
    expect(terminated.inflight_at_stop).toBe(0);
    expect(lc.events.some((e) => e.event === "drain_fallback")).toBe(false);
    expect(await lc.exited).toEqual({ code: 0, signal: null });
  });
});
