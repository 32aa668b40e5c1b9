// Every listener Envoy can be given, beyond the static ones with filter chains: each gets the
// filter and is counted, or is counted by Envoy's stats and said so.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { http1 } from "../filter/clients.ts";
import { localCluster, ROUTER } from "../support/envoy-bootstrap.ts";
import { inboundConfig, type TestLastcall, writeConfig } from "../support/lastcall.ts";
import { heldAcrossSigterm, serving, upstreamForFile } from "../support/serving.ts";

const app = upstreamForFile();

const names = (lc: TestLastcall) => lc.events.map((e) => e.event);
const HCM =
  "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
/** An HTTP connection manager in front of cluster `app`. */
function hcmChain(statPrefix: string): Record<string, unknown> {
  return {
    filters: [{
      name: "envoy.filters.network.http_connection_manager",
      typed_config: {
        "@type": HCM,
        stat_prefix: statPrefix,
        route_config: {
          virtual_hosts: [{
            name: "app",
            domains: ["*"],
            routes: [{ match: { prefix: "/" }, route: { cluster: "app", timeout: "0s" } }],
          }],
        },
        http_filters: [ROUTER],
      },
    }],
  };
}

/** A bootstrap whose listeners come from the LDS file `ldsPath`, in front of cluster `app`. */
function ldsBootstrap(ldsPath: string): Record<string, unknown> {
  return {
    node: { id: "lastcall-test", cluster: "test" },
    dynamic_resources: {
      lds_config: { resource_api_version: "V3", path_config_source: { path: ldsPath } },
    },
    static_resources: { clusters: [localCluster("app", app.port)] },
  };
}

describe("listeners beyond the static ones", () => {
  it("a listener with only a default_filter_chain gets the filter and is counted", async () => {
    const config = inboundConfig({ upstreamPort: app.port }) as {
      static_resources: { listeners: Array<Record<string, unknown>> };
    };
    const listener = config.static_resources.listeners[0];
    listener.default_filter_chain = hcmChain("ingress");
    delete listener.filter_chains;
    const { lc, port, status } = await serving(app.port, ["--min-drain", "0s"], { config });
    expect(await lc.event("start")).toMatchObject({ filter: ["ingress"] });
    await heldAcrossSigterm(app, lc, port, status);
  });

  it("an LDS listener from a file gets the filter through lastcall's rewritten copy", async () => {
    const dir = mkdtempSync(join(tmpdir(), "lastcall-lds-"));
    const ldsPath = join(dir, "lds.json");
    writeFileSync(
      ldsPath,
      JSON.stringify({
        resources: [{
          "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
          name: "ingress",
          traffic_direction: "INBOUND",
          address: { socket_address: { address: "127.0.0.1", port_value: 0 } },
          filter_chains: [hcmChain("lds_ingress")],
        }],
      }),
    );
    const config = ldsBootstrap(ldsPath);
    const { lc, port, status } = await serving(app.port, ["--min-drain", "0s"], {
      config: writeConfig(config, dir),
    });
    await heldAcrossSigterm(app, lc, port, status);
    expect(names(lc)).not.toContain("drain_fallback");
  });

  it("a listener source lastcall cannot relay (a .pb_text file) is counted by Envoy's stats, every connection manager, and said so", async () => {
    const dir = mkdtempSync(join(tmpdir(), "lastcall-lds-"));
    const ldsPath = join(dir, "lds.pb_text");
    // The same listener in protobuf text format, which lastcall does not rewrite.
    writeFileSync(
      ldsPath,
      `resources {
  [type.googleapis.com/envoy.config.listener.v3.Listener] {
    name: "ingress"
    traffic_direction: INBOUND
    address { socket_address { address: "127.0.0.1" port_value: 0 } }
    filter_chains { filters { name: "envoy.filters.network.http_connection_manager" typed_config {
      [type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager] {
        stat_prefix: "lds_ingress"
        route_config { virtual_hosts { name: "app" domains: "*" routes { match { prefix: "/" } route { cluster: "app" timeout { } } } } }
        http_filters { name: "envoy.filters.http.router" typed_config { [type.googleapis.com/envoy.extensions.filters.http.router.v3.Router] { } } }
      } } } }
  }
}
`,
    );
    const config = ldsBootstrap(ldsPath);
    const { lc, port } = await serving(app.port, ["--min-drain", "0s"], {
      config: writeConfig(config, dir),
      filter: false,
    });
    const start = await lc.event("start");
    expect(start.counted_by_stats).toEqual([expect.stringMatching(/^LDS file .*lds\.pb_text/)]);
    const held = http1(port, "/hold");
    await app.until((a) => a.held === 1);
    lc.signal("SIGTERM");
    expect(await lc.event("drain_start")).toMatchObject({
      counted_by_stats: start.counted_by_stats,
    });
    await lc.event("drain_fallback");
    await new Promise((done) => setTimeout(done, 600)); // three polls of the stats: still held
    expect(names(lc)).not.toContain("drain_wait_done");
    app.release();
    expect(await held).toEqual({ status: 200, reset: false });
    expect(await lc.event("terminated")).toMatchObject({
      reason: "requests_zero_fallback",
      inflight_at_stop: 0,
    });
  });
});
