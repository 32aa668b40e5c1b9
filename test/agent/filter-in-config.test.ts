// A config that already has lastcall's filter (pasted from docs/filter.md, for an Envoy without
// lastcall) given to `lastcall run`: lastcall puts its own in that place instead of adding a
// second, so one request counts once and the drain ends on the filter's zero. Real Envoy.
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { http1 } from "../filter/clients.ts";
import { inboundConfig, writeConfig } from "../support/lastcall.ts";
import { root } from "../support/paths.ts";
import { agentSees, agentState, serving, upstreamForFile } from "../support/serving.ts";

const app = upstreamForFile();

/** The HTTP filter as docs/filter.md shows it, with the filter built for the tests. */
const pasted = {
  name: "lastcall_inflight",
  typed_config: {
    "@type": "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm",
    config: {
      name: "lastcall_inflight",
      root_id: "lastcall_inflight",
      configuration: { "@type": "type.googleapis.com/google.protobuf.StringValue", value: "" },
      vm_config: {
        vm_id: "lastcall_inflight",
        runtime: "envoy.wasm.runtime.v8",
        code: { local: { filename: join(root, "dist/filter.wasm") } },
      },
    },
  },
};

describe("a config that already has lastcall's filter", () => {
  it("counts a request once (default settings), and the drain ends on the filter's zero", async () => {
    const config = inboundConfig({ upstreamPort: app.port }) as {
      static_resources: {
        listeners: {
          filter_chains: { filters: { typed_config: { http_filters: unknown[] } }[] }[];
        }[];
      };
    };
    const hcm = config.static_resources.listeners[0].filter_chains[0].filters[0].typed_config;
    hcm.http_filters = [pasted, ...hcm.http_filters];
    const { lc, port, status } = await serving(app.port, [], { config: writeConfig(config) });
    const held = http1(port, "/hold");
    await app.until((a) => a.held === 1);
    await agentSees(status, 1);
    // Twice in the chain it would read 2: give a second copy every chance to be seen.
    const second = http1(port, "/hold");
    await app.until((a) => a.held === 2);
    await agentSees(status, 2);
    expect((await agentState(status)).inflight).toBe(2);
    lc.signal("SIGTERM");
    await lc.event("listeners_draining");
    app.release();
    expect(await held).toEqual({ status: 200, reset: false });
    expect(await second).toEqual({ status: 200, reset: false });
    expect(await lc.event("terminated")).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
    });
  });
});
