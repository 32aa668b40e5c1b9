// deriveBootstrap: which listeners count, and how. Every listener not explicitly OUTBOUND is
// inbound (marked INBOUND for Envoy's inbound-only drain); HTTP ones get the filter, tcp_proxy
// ones its connection-counting variant; listeners from LDS are named as unseen.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { deriveBootstrap, FILTER_NAME } from "../../agent/envoy/bootstrap.ts";
import { ROUTER } from "../support/envoy-bootstrap.ts";
import type { Json } from "../support/json.ts";
import {
  hcm,
  httpFilterNames,
  listener,
  options,
  tcpProxy,
  withFilter,
} from "./bootstrap-inputs.ts";

describe("deriveBootstrap", () => {
  it("counts every listener not marked OUTBOUND: an unmarked one beside an INBOUND one gets the filter and is marked INBOUND", () => {
    const input = {
      static_resources: {
        listeners: [listener("in", "INBOUND"), listener("out", "OUTBOUND"), listener("plain")],
      },
    };
    const result = deriveBootstrap(input, withFilter);
    expect(httpFilterNames(result.config, 0)).toEqual([FILTER_NAME, ROUTER.name]);
    expect(httpFilterNames(result.config, 1)).toEqual([FILTER_NAME, ROUTER.name]);
    expect(httpFilterNames(result.config, 2)).toEqual([FILTER_NAME, ROUTER.name]);
    // Envoy's drain_listeners?inboundonly drains only listeners marked INBOUND.
    expect((result.config as Json).static_resources.listeners.map((l: Json) => l.traffic_direction))
      .toEqual([
        "INBOUND",
        "OUTBOUND",
        "INBOUND",
      ]);
    expect(input.static_resources.listeners[2].traffic_direction).toBeUndefined();
    expect(result).toMatchObject({
      inboundListeners: ["in", "plain"],
      inboundStatPrefixes: ["in", "plain"],
      filteredListeners: ["in", "plain"],
      outboundListeners: ["out"],
    });
    expect(result.filteredStatPrefixes).toEqual(expect.arrayContaining(["in", "plain", "out"]));
    expect(result.listeners).toEqual([
      { name: "in", direction: "INBOUND", counted: "filter", delivery: "tcp_queue" },
      { name: "out", direction: "OUTBOUND", counted: "filter_outbound", delivery: "tcp_queue" },
      { name: "plain", direction: "unmarked", counted: "filter", delivery: "tcp_queue" },
    ]);
  });

  it("keeps OUTBOUND listeners outbound when no listener is marked INBOUND, and reads the enum's numbers", () => {
    const input = {
      static_resources: {
        listeners: [listener("out", "OUTBOUND", [tcpProxy]), listener("plain"), {
          ...listener("two", undefined, [tcpProxy]),
          traffic_direction: 2,
        }],
      },
    };
    const result = deriveBootstrap(input, withFilter);
    expect(result.inboundListeners).toEqual(["plain"]);
    expect(result.tcpListeners).toEqual([]);
    expect(result.listeners.map((l) => [l.name, l.direction, l.counted])).toEqual([
      ["out", "OUTBOUND", "not_counted"],
      ["plain", "unmarked", "filter"],
      ["two", "OUTBOUND", "not_counted"],
    ]);
  });

  it("counts connections (TCP variant) on inbound tcp_proxy only, not on outbound pools", () => {
    const input = {
      static_resources: {
        listeners: [listener("in", "INBOUND", [tcpProxy]), listener("db", "OUTBOUND", [tcpProxy])],
      },
    };
    const result = deriveBootstrap(input, withFilter);
    expect(result.tcpListeners).toEqual(["in"]);
    expect((result.config as Json).static_resources.listeners[1].filter_chains[0].filters).toEqual([
      tcpProxy,
    ]);
  });

  it("treats every listener as inbound when none is marked", () => {
    const result = deriveBootstrap({
      static_resources: { listeners: [listener("a"), listener("b", undefined, [tcpProxy])] },
    }, withFilter);
    expect(result).toMatchObject({
      inboundListeners: ["a", "b"],
      inboundStatPrefixes: ["a"],
      filteredListeners: ["a"],
      tcpListeners: ["b"],
    });
    expect(result.listeners).toEqual([{
      name: "a",
      direction: "unmarked",
      counted: "filter",
      delivery: "tcp_queue",
    }, { name: "b", direction: "unmarked", counted: "filter_tcp", delivery: "tcp_queue" }]);
  });

  it("counts a listener unless it is explicitly OUTBOUND, whatever the mix (property)", () => {
    const direction = fc.constantFrom<string | number | undefined>(
      "INBOUND",
      "OUTBOUND",
      undefined,
      1,
      2,
      "UNSPECIFIED",
      0,
    );
    const kind = fc.constantFrom("http", "tcp", "other");
    const other = {
      name: "envoy.filters.network.echo",
      typed_config: {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.echo.v3.Echo",
      },
    };
    fc.assert(
      fc.property(
        fc.array(fc.tuple(direction, kind), { maxLength: 6 }),
        fc.boolean(),
        (specs, filtered) => {
          const input = {
            static_resources: {
              listeners: specs.map(([d, k], i) => ({
                ...listener(`l${i}`, undefined, [
                  k === "http" ? hcm(`l${i}`) : k === "tcp" ? tcpProxy : other,
                ]),
                ...(d === undefined ? {} : { traffic_direction: d }),
              })),
            },
          };
          const result = deriveBootstrap(input, filtered ? withFilter : options);
          specs.forEach(([d, k], i) => {
            const out = d === "OUTBOUND" || d === 2;
            const written = (result.config as Json).static_resources.listeners[i];
            const seen = result.listeners[i];
            expect(seen.name).toBe(`l${i}`);
            expect(result.inboundListeners.includes(`l${i}`)).toBe(!out);
            // Every non-OUTBOUND listener is drained by Envoy's inbound-only drain: marked INBOUND.
            if (!out) expect(["INBOUND", 1]).toContain(written.traffic_direction);
            else expect(written.traffic_direction).toBe(d);
            const expected = k === "other"
              ? "not_counted"
              : !filtered
              ? (k === "http" && !out ? "stats" : "not_counted")
              : k === "http"
              ? (out ? "filter_outbound" : "filter")
              : out
              ? "not_counted"
              : "filter_tcp";
            expect(seen.counted).toBe(expected);
          });
        },
      ),
    );
  });

  it("names listeners it cannot see: LDS", () => {
    const lds = {
      dynamic_resources: { lds_config: { path_config_source: { path: "/etc/envoy/lds.yaml" } } },
    };
    expect(deriveBootstrap(lds, withFilter).unseenListeners).toEqual([
      "LDS (dynamic_resources.lds_config)",
    ]);
    expect(
      deriveBootstrap({ static_resources: { listeners: [listener("in")] } }, withFilter)
        .unseenListeners,
    ).toEqual([]);
  });
});
