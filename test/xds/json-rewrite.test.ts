// The rewrite of LDS files written as JSON/YAML: the same rule as static listeners and the wire
// level. Every listener not marked OUTBOUND gets the filter and, when unmarked, INBOUND.
import { describe, expect, it } from "vitest";
import YAML from "yaml";
import { wasmFilter } from "../../agent/envoy/bootstrap.ts";
import { rewriteFile } from "../../agent/xds/file-lds.ts";
import { insertIntoListener } from "../../agent/xds/listener-json.ts";
import { encodeFilters } from "../../agent/xds/proxy.ts";
import type { Json } from "../support/json.ts";

const filter = { wasmPath: "/x/filter.wasm", pluginConfig: { instance: "7-1-0", token: "t" } };
const filters = { http: wasmFilter(filter), tcp: wasmFilter(filter, true) };
const encoded = encodeFilters({
  socketPath: "",
  token: "",
  files: [],
  relayed: [],
  unseen: [],
  filters,
});
const LISTENER = "type.googleapis.com/envoy.config.listener.v3.Listener";
const hcm = (prefix: string) => ({
  name: "envoy.filters.network.http_connection_manager",
  typed_config: {
    "@type":
      "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
    stat_prefix: prefix,
    http_filters: [{ name: "envoy.filters.http.router" }],
  },
});
const tcpProxy = {
  name: "envoy.filters.network.tcp_proxy",
  typed_config: {
    "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
    cluster: "app",
  },
};
const listener = (name: string, direction: string | undefined, filter: Json): Json => ({
  "@type": LISTENER,
  name,
  ...(direction ? { traffic_direction: direction } : {}),
  filter_chains: [{ filters: [filter] }],
});

describe("insertIntoListener", () => {
  it("gives an unmarked listener the filter and marks it INBOUND; keeps OUTBOUND counted, not drained", () => {
    const plain = listener("plain", undefined, hcm("plain"));
    expect(insertIntoListener(plain, filters)).toEqual({
      name: "plain",
      direction: "unmarked",
      marked: true,
      counted: "filter",
      delivery: "tcp_queue",
      http: 1,
      tcp: 0,
    });
    expect(plain.traffic_direction).toBe("INBOUND");
    expect(plain.filter_chains[0].filters[0].typed_config.http_filters[0].name).toBe(
      "lastcall_inflight",
    );
    const out = listener("out", "OUTBOUND", tcpProxy);
    expect(insertIntoListener(out, filters)).toMatchObject({
      direction: "OUTBOUND",
      marked: false,
      counted: "not_counted",
      tcp: 0,
    });
    expect(out.traffic_direction).toBe("OUTBOUND");
    const tcp = listener("tcp", undefined, tcpProxy);
    expect(insertIntoListener(tcp, filters)).toMatchObject({
      counted: "filter_tcp",
      tcp: 1,
      marked: true,
    });
    // A second pass finds both there: nothing inserted, still counted.
    expect(insertIntoListener(plain, filters)).toEqual({
      name: "plain",
      direction: "INBOUND",
      marked: false,
      counted: "filter",
      delivery: "tcp_queue",
      http: 0,
      tcp: 0,
    });
  });
});

describe("rewriteFile", () => {
  it("rewrites a file whose only change is the direction (a listener lastcall counts must be drained)", () => {
    const already = listener("plain", undefined, hcm("plain"));
    already.filter_chains[0].filters[0].typed_config.http_filters.unshift(filters.http);
    const content = new TextEncoder().encode(YAML.stringify({ resources: [already] }));
    const out = rewriteFile(content, "yaml", { filters, encoded });
    expect(out.listeners).toEqual([{
      name: "plain",
      direction: "unmarked",
      marked: true,
      counted: "filter",
      delivery: "tcp_queue",
      http: 0,
      tcp: 0,
    }]);
    expect(JSON.parse(new TextDecoder().decode(out.content)).resources[0].traffic_direction).toBe(
      "INBOUND",
    );
  });

  it("leaves a file alone when every listener is marked and already has the filter", () => {
    const done = listener("in", "INBOUND", hcm("in"));
    done.filter_chains[0].filters[0].typed_config.http_filters.unshift(filters.http);
    const content = new TextEncoder().encode(YAML.stringify({ resources: [done] }));
    expect(rewriteFile(content, "yaml", { filters, encoded }).content).toBe(content);
  });
});
