// What a control plane does over time reaches Envoy through lastcall as it would without it:
// listener updates (the filter stays in place, no request fails), a control-plane restart
// (the stream resumes), a bad resource (Envoy's NACK reaches the control plane unchanged).
import { copyFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { FILTER_WASM } from "../support/envoy-bootstrap.ts";
import { waitFor } from "../support/envoy.ts";
import { freePort, startLastcall, type TestLastcall } from "../support/lastcall.ts";
import { upstreamForFile } from "../support/serving.ts";
import {
  buildXdsServer,
  startXdsServer,
  stopAllXdsServers,
  type XdsServer,
} from "../support/xds-server/index.ts";
import {
  appCluster,
  basicSnapshot,
  configSource,
  dumpedHttpFilters,
  get,
  hcm,
  httpListener,
  inflightGauge,
  route,
  xdsBootstrap,
  type XdsVariant,
} from "./resources.ts";

const app = upstreamForFile();
beforeAll(() => void buildXdsServer(), 300_000);
afterEach(() => stopAllXdsServers());

async function started(
  variant: XdsVariant,
  args: string[] = [],
): Promise<{ cp: XdsServer; lc: TestLastcall; port: number }> {
  const cp = await startXdsServer();
  const port = await freePort();
  await cp.push(
    basicSnapshot({ version: "1", listenerPort: port, appPort: app.port, service: "ads", variant }),
  );
  const lc = startLastcall(xdsBootstrap({ xdsPort: cp.port, service: "ads", variant }), {
    args: ["--min-drain", "0s", ...args],
  });
  await lc.event("ready");
  await waitFor(async () => ((await get(port, "/")).status === 200 ? true : undefined), {
    what: "the LDS listener to serve",
  });
  return { cp, lc, port };
}

/** Sends requests one after another until stopped; every answer that is not a 200 is kept. */
function steadyLoad(port: number) {
  let stop = false;
  const failures: string[] = [];
  const versions = new Set<string>();
  let sent = 0;
  const done = (async () => {
    while (!stop && sent < 5000) {
      sent++;
      try {
        const r = await get(port, "/");
        if (r.status !== 200) failures.push(`status ${r.status}`);
        versions.add(`${r.headers["x-version"]}/${r.headers["x-chain"] ?? "first"}`);
      } catch (error) {
        failures.push(String(error));
      }
    }
  })();
  return {
    versions,
    failures,
    get sent() {
      return sent;
    },
    async stop() {
      stop = true;
      await done;
    },
  };
}

describe.each<XdsVariant>(["sotw", "delta"])("ADS (%s)", (variant) => {
  it("relays a listener update (new route, new filter chain) with the filter still in place and no request failed", async () => {
    const { cp, lc, port } = await started(variant);
    const load = steadyLoad(port);
    await waitFor(() => (load.sent > 20 ? true : undefined), { what: "load to run" });
    // Version 2: a new route, and a second filter chain for 127.0.0.1 with its own inline route.
    const source = configSource("ads", variant);
    const listener = httpListener("ingress", port, hcm("ingress", { rds: "local_route", source }), {
      traffic_direction: "INBOUND",
    });
    (listener.filter_chains as unknown[]).push({
      filter_chain_match: {
        source_prefix_ranges: [{ address_prefix: "127.0.0.1", prefix_len: 32 }],
      },
      filters: [hcm("ingress_new", { inline: route("inline", "2", { "x-chain": "new" }) })],
    });
    await cp.push({
      version: "2",
      listeners: [listener],
      routes: [route("local_route", "2")],
      clusters: [appCluster(app.port)],
    });
    await waitFor(() => (load.versions.has("2/new") ? true : undefined), {
      what: "the new filter chain to answer",
      timeoutMs: 20_000,
    });
    const after = load.sent;
    await waitFor(() => (load.sent > after + 20 ? true : undefined), {
      what: "more load on the new chain",
    });
    await load.stop();
    expect(load.failures).toEqual([]);

    const chains = await dumpedHttpFilters(lc.adminUrl(), "ingress");
    expect(chains).toHaveLength(2);
    for (const filters of chains) expect(filters[0].name).toBe("lastcall_inflight");
    const held = get(port, "/hold");
    await app.until((a) => a.held === 1);
    expect(await inflightGauge(lc.adminUrl())).toBe(1);
    app.release();
    expect((await held).headers["x-chain"]).toBe("new");
  });

  it("resumes after the control plane restarts mid-stream; Envoy keeps serving meanwhile", async () => {
    const { cp, lc, port } = await started(variant);
    const xdsPort = cp.port;
    await cp.kill();
    await lc.event("xds_upstream_ended");
    // Envoy keeps the last config while the control plane is away.
    expect((await get(port, "/")).headers["x-version"]).toBe("1");
    const again = await startXdsServer({ port: xdsPort });
    await again.push(
      basicSnapshot({
        version: "2",
        listenerPort: port,
        appPort: app.port,
        service: "ads",
        variant,
      }),
    );
    await waitFor(
      async () => ((await get(port, "/")).headers["x-version"] === "2" ? true : undefined),
      { what: "version 2 from the restarted control plane", timeoutMs: 40_000 },
    );
    const [filters] = await dumpedHttpFilters(lc.adminUrl(), "ingress");
    expect(filters[0].name).toBe("lastcall_inflight");
    expect(await again.streams()).toBeGreaterThanOrEqual(1);
  });

  it("passes Envoy's NACK of a bad listener to the control plane unchanged, and counts it", async () => {
    const { cp, lc, port } = await started(variant);
    const good = basicSnapshot({
      version: "2",
      listenerPort: port,
      appPort: app.port,
      service: "ads",
      variant,
    });
    // Two filter chains with the same match: Envoy refuses the listener.
    const bad = httpListener("bad", await freePort(), hcm("bad", { inline: route("r", "x") }));
    (bad.filter_chains as unknown[]).push((bad.filter_chains as unknown[])[0]);
    await cp.push({ ...good, listeners: [...good.listeners, bad] });
    const nack = await lc.event("xds_nack");
    expect(nack.cause).toBe("control_plane");
    expect(String(nack.message)).toContain("bad");
    const seen = await waitFor(async () => (await cp.requests()).find((r) => r.error), {
      what: "the NACK at the control plane",
    });
    expect(seen.error).toBe(nack.message);
    expect(seen.response_nonce).toBe(nack.nonce);
    const metrics = await fetch(`${await lc.statusUrl()}/metrics`).then((r) => r.text());
    expect(metrics).toMatch(/lastcall_xds_nacks_total\{cause="control_plane"\} [1-9]/);
    expect(metrics).toMatch(/lastcall_xds_listeners_rewritten_total [1-9]/);
    // The good listener still serves, with the filter.
    expect((await get(port, "/")).status).toBe(200);
  });
});

it("gives a hot-restart child its own proxy: its listeners report under its own instance", async () => {
  const { lc, port } = await started("delta", []);
  const parentInstance = JSON.parse(
    (await dumpedHttpFilters(lc.adminUrl(), "ingress"))[0][0].typed_config.config.configuration
      .value,
  ).instance;
  expect(parentInstance).toMatch(/-1-0$/);
  lc.signal("SIGHUP");
  await lc.event("ready", (e) => e.epoch === 1);
  const [filters] = await dumpedHttpFilters(lc.adminUrl(), "ingress");
  expect(JSON.parse(filters[0].typed_config.config.configuration.value).instance).toBe(
    parentInstance.replace(/-0$/, "-1"),
  );
  await lc.event("epoch_drained", (e) => (e.epochs as number[]).includes(0));
  const held = get(port, "/hold");
  await app.until((a) => a.held === 1);
  lc.signal("SIGTERM");
  await lc.event("drain_start");
  app.release();
  expect((await held).status).toBe(200);
  expect((await lc.event("terminated")).reason).toBe("inflight_zero");
});

it("blames lastcall for a NACK its own change caused, and passes it on unchanged", async () => {
  const cp = await startXdsServer();
  const port = await freePort();
  // No listener at first; the filter module then disappears, so Envoy cannot load the filter
  // lastcall inserts into the listener that comes next.
  await cp.push({ version: "1", clusters: [appCluster(app.port)] });
  const wasm = join(mkdtempSync(join(tmpdir(), "lastcall-wasm-")), "filter.wasm");
  copyFileSync(FILTER_WASM, wasm);
  const lc = startLastcall(xdsBootstrap({ xdsPort: cp.port, service: "ads", variant: "sotw" }), {
    args: ["--filter-wasm", wasm],
  });
  await lc.event("ready");
  rmSync(wasm);
  await cp.push(
    basicSnapshot({
      version: "2",
      listenerPort: port,
      appPort: app.port,
      service: "ads",
      variant: "sotw",
    }),
  );
  const nack = await lc.event("xds_nack");
  expect(nack.cause).toBe("lastcall");
  const seen = await waitFor(async () => (await cp.requests()).find((r) => r.error), {
    what: "the NACK at the control plane",
  });
  expect(seen.error).toBe(nack.message);
  const metrics = await fetch(`${await lc.statusUrl()}/metrics`).then((r) => r.text());
  expect(metrics).toMatch(/lastcall_xds_nacks_total\{cause="lastcall"\} [1-9]/);
});

it("with the control plane unreachable at start, Envoy's stream fails and retries until it comes up", async () => {
  const xdsPort = await freePort();
  const port = await freePort();
  const lc = startLastcall(xdsBootstrap({ xdsPort, service: "ads", variant: "sotw" }), {
    args: ["--min-drain", "0s"],
  });
  const ended = await lc.event("xds_upstream_ended");
  expect(ended.code).toBe("UNAVAILABLE");
  // Nothing is invented meanwhile: no listener reaches Envoy.
  expect(lc.events.some((e) => e.event === "xds_listeners")).toBe(false);
  const cp = await startXdsServer({ port: xdsPort });
  await cp.push(
    basicSnapshot({
      version: "1",
      listenerPort: port,
      appPort: app.port,
      service: "ads",
      variant: "sotw",
    }),
  );
  await lc.event("xds_listeners", undefined, 40_000);
  await waitFor(
    async () => ((await get(port, "/").catch(() => undefined))?.status === 200 ? true : undefined),
    { what: "the listener to serve", timeoutMs: 20_000 },
  );
});
