import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  AGENT_CLUSTER,
  BootstrapError,
  deriveBootstrap,
  FILTER_NAME,
} from "../../agent/envoy/bootstrap.ts";
import type { Json } from "../support/json.ts";

const router = {
  name: "envoy.filters.http.router",
  typed_config: { "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router" },
};

function hcm(statPrefix: string): Json {
  return {
    name: "envoy.filters.network.http_connection_manager",
    typed_config: {
      "@type":
        "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
      stat_prefix: statPrefix,
      route_config: { virtual_hosts: [] },
      http_filters: [router],
    },
  };
}

function listener(name: string, direction?: string, filters: Json[] = [hcm(name)]): Json {
  return {
    name,
    ...(direction ? { traffic_direction: direction } : {}),
    address: { socket_address: { address: "0.0.0.0", port_value: 8080 } },
    filter_chains: [{ filters }],
  };
}

const tcpProxy = {
  name: "envoy.filters.network.tcp_proxy",
  typed_config: {
    "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
    stat_prefix: "tcp",
    cluster: "app",
  },
};
const options = { adminPort: 15000, statusAddress: "127.0.0.1", statusPort: 15020 };
const withFilter = {
  ...options,
  filter: { wasmPath: "/opt/filter.wasm", pluginConfig: { heartbeat_ms: 1000 } },
};

/** Names of the HTTP filters of a listener's first connection manager. */
const httpFilterNames = (config: Json, index: number) =>
  config.static_resources.listeners[index].filter_chains[0].filters.find((f: Json) =>
    f.typed_config.http_filters
  )
    .typed_config.http_filters.map((f: Json) => f.name);

describe("deriveBootstrap", () => {
  it("adds admin on loopback at the admin port when the config has none", () => {
    const { config } = deriveBootstrap({}, options);
    expect(config.admin).toEqual({
      address: { socket_address: { address: "127.0.0.1", port_value: 15000 } },
    });
  });

  it("keeps an admin on a Unix socket (Contour's bootstraps), and puts one there with adminSocket", () => {
    const admin = { address: { pipe: { path: "/admin/admin.sock" } } };
    expect(deriveBootstrap({ admin }, options).config.admin).toEqual(admin);
    expect(deriveBootstrap({}, { ...options, adminSocket: "/run/admin.sock" }).config.admin)
      .toEqual({ address: { pipe: { path: "/run/admin.sock" } } });
  });

  it("keeps a loopback admin on the admin port", () => {
    const admin = {
      address: { socket_address: { address: "127.0.0.1", port_value: 15000 } },
      access_log: [],
    };
    expect(deriveBootstrap({ admin }, options).config.admin).toEqual(admin);
  });

  it.each([
    [
      { address: { socket_address: { address: "0.0.0.0", port_value: 15000 } } },
      "Envoy config admin address must be loopback, not 0.0.0.0",
    ],
    [
      { address: { socket_address: { address: "127.0.0.1", port_value: 9901 } } },
      "Envoy config admin port 9901 differs from --admin-port 15000",
    ],
    [
      { address: { envoy_internal_address: { server_listener_name: "admin" } } },
      "Envoy config admin has neither socket_address nor pipe: lastcall needs admin on 127.0.0.1 or a Unix socket",
    ],
  ])("refuses admin %j", (admin, message) => {
    expect(() => deriveBootstrap({ admin }, options)).toThrow(new BootstrapError(message));
  });

  it.each([null, "text", [1, 2], 42])("refuses a config that is not an object: %j", (input) => {
    expect(() => deriveBootstrap(input, options)).toThrow(
      "Envoy config must be a YAML or JSON object",
    );
  });

  it("adds a static cluster to the agent's status server", () => {
    const { config } = deriveBootstrap({ static_resources: { clusters: [{ name: "app" }] } }, {
      ...options,
      statusAddress: "10.0.0.5",
      statusPort: 4000,
    });
    const clusters = config.static_resources.clusters as Json[];
    expect(clusters.map((c) => c.name)).toEqual(["app", AGENT_CLUSTER]);
    expect(clusters[1].load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address)
      .toEqual({ address: "10.0.0.5", port_value: 4000 });
  });

  it("refuses a config that already has the agent's cluster name", () => {
    expect(() =>
      deriveBootstrap({ static_resources: { clusters: [{ name: AGENT_CLUSTER }] } }, options)
    ).toThrow(/already has a cluster named lastcall_agent/);
  });

  it("counts every listener not marked OUTBOUND: an unmarked one beside an INBOUND one gets the filter and is marked INBOUND", () => {
    const input = {
      static_resources: {
        listeners: [listener("in", "INBOUND"), listener("out", "OUTBOUND"), listener("plain")],
      },
    };
    const result = deriveBootstrap(input, withFilter);
    expect(httpFilterNames(result.config, 0)).toEqual([FILTER_NAME, router.name]);
    expect(httpFilterNames(result.config, 1)).toEqual([FILTER_NAME, router.name]);
    expect(httpFilterNames(result.config, 2)).toEqual([FILTER_NAME, router.name]);
    // Envoy's drain_listeners?inboundonly drains only listeners marked INBOUND.
    expect(result.config.static_resources.listeners.map((l: Json) => l.traffic_direction)).toEqual([
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
    expect(result.config.static_resources.listeners[1].filter_chains[0].filters).toEqual([
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
            const written = result.config.static_resources.listeners[i];
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

  it("configures the wasm filter to fail open with the plugin configuration as JSON", () => {
    const { config } = deriveBootstrap(
      { static_resources: { listeners: [listener("in")] } },
      withFilter,
    );
    const wasm =
      config.static_resources.listeners[0].filter_chains[0].filters[0].typed_config.http_filters[0]
        .typed_config.config;
    expect(wasm).toMatchObject({
      root_id: FILTER_NAME,
      failure_policy: "FAIL_OPEN",
      vm_config: { vm_id: FILTER_NAME, code: { local: { filename: "/opt/filter.wasm" } } },
      configuration: { value: JSON.stringify({ heartbeat_ms: 1000 }) },
    });
  });

  it("a config that already has the filter (copied from docs/filter.md) gets lastcall's in its place, never twice", () => {
    const theirs = {
      name: FILTER_NAME,
      typed_config: {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm",
        config: { configuration: { value: "" } },
      },
    };
    const http = listener("in", "INBOUND");
    http.filter_chains[0].filters[0].typed_config.http_filters = [{ name: "cors" }, theirs, router];
    const theirsTcp = { name: `${FILTER_NAME}_tcp`, typed_config: {} };
    const { config } = deriveBootstrap({
      static_resources: { listeners: [http, listener("tcp", "INBOUND", [theirsTcp, tcpProxy])] },
    }, withFilter);
    const filters =
      config.static_resources.listeners[0].filter_chains[0].filters[0].typed_config.http_filters;
    expect(filters.map((f: Json) => f.name)).toEqual(["cors", FILTER_NAME, router.name]);
    expect(filters[1].typed_config.config.configuration.value).toBe(
      JSON.stringify({ heartbeat_ms: 1000 }),
    );
    const tcp = config.static_resources.listeners[1].filter_chains[0].filters;
    expect(tcp.map((f: Json) => f.name)).toEqual([`${FILTER_NAME}_tcp`, tcpProxy.name]);
    expect(tcp[0].typed_config.config.vm_config.vm_id).toBe("lastcall_inflight_tcp");
  });

  it("without a filter (--no-filter) leaves the connection managers alone but still knows their prefixes", () => {
    const result = deriveBootstrap(
      { static_resources: { listeners: [listener("in", "INBOUND")] } },
      options,
    );
    expect(httpFilterNames(result.config, 0)).toEqual([router.name]);
    expect(result).toMatchObject({ inboundStatPrefixes: ["in"], filteredListeners: [] });
    expect(result.listeners).toEqual([{
      name: "in",
      direction: "INBOUND",
      counted: "stats",
      delivery: "tcp_queue",
    }]);
  });

  it("puts the connection-counting variant before tcp_proxy, with its own VM and instance", () => {
    const result = deriveBootstrap({
      static_resources: { listeners: [listener("tcp", "INBOUND", [tcpProxy])] },
    }, withFilter);
    const filters = result.config.static_resources.listeners[0].filter_chains[0].filters;
    expect(filters).toHaveLength(2);
    expect(filters[1]).toEqual(tcpProxy);
    const wasm = filters[0].typed_config;
    expect(wasm["@type"]).toBe("type.googleapis.com/envoy.extensions.filters.network.wasm.v3.Wasm");
    expect(wasm.config.vm_config.vm_id).toBe("lastcall_inflight_tcp");
    expect(wasm.config.root_id).toBe("lastcall_inflight");
    expect(JSON.parse(wasm.config.configuration.value).instance).toMatch(/\/tcp$/);
    expect(result).toMatchObject({
      inboundListeners: ["tcp"],
      inboundStatPrefixes: [],
      filteredListeners: [],
      tcpListeners: ["tcp"],
    });
  });

  it("leaves tcp_proxy chains alone without the filter", () => {
    const result = deriveBootstrap({
      static_resources: { listeners: [listener("tcp", "INBOUND", [tcpProxy])] },
    }, { ...withFilter, filter: undefined });
    expect(result.config.static_resources.listeners[0].filter_chains[0].filters).toEqual([
      tcpProxy,
    ]);
    expect(result.tcpListeners).toEqual([]);
  });

  it("gives inbound connection managers that leave it unset the delayed close asked for, not others", () => {
    const own = hcm("own");
    own.typed_config.delayed_close_timeout = "0.5s";
    const config = {
      static_resources: {
        listeners: [
          listener("in"),
          listener("mine", "INBOUND", [own]),
          listener("out", "OUTBOUND"),
        ],
      },
    };
    const delayedClose = (c: Json, i: number) =>
      c.static_resources.listeners[i].filter_chains[0].filters.at(-1).typed_config
        .delayed_close_timeout;
    const asked = deriveBootstrap(config, { ...withFilter, delayedCloseMs: 3000 }).config;
    expect([0, 1, 2].map((i) => delayedClose(asked, i))).toEqual(["3s", "0.5s", undefined]);
    expect(delayedClose(deriveBootstrap(config, withFilter).config, 0)).toBeUndefined();
  });

  it("changes nothing else, and not the input", () => {
    const input = {
      node: { id: "n" },
      stats_flush_interval: "5s",
      static_resources: { listeners: [listener("in")], clusters: [{ name: "app" }] },
    };
    const before = structuredClone(input);
    const { config } = deriveBootstrap(input, withFilter);
    expect(input).toEqual(before);
    expect(config.node).toEqual({ id: "n" });
    expect(config.stats_flush_interval).toBe("5s");
    expect(config.static_resources.listeners[0].address).toEqual(
      before.static_resources.listeners[0].address,
    );
  });

  it("inserts the filter into a listener's default_filter_chain, alone or beside matched chains", () => {
    const onlyDefault = {
      name: "d",
      traffic_direction: "INBOUND",
      default_filter_chain: { filters: [hcm("d")] },
    };
    const both = {
      ...listener("b", "INBOUND"),
      default_filter_chain: { filters: [hcm("b_default")] },
    };
    const result = deriveBootstrap(
      { static_resources: { listeners: [onlyDefault, both] } },
      withFilter,
    );
    const names = (chain: Json) =>
      chain.filters[0].typed_config.http_filters.map((f: Json) => f.name);
    expect(names(result.config.static_resources.listeners[0].default_filter_chain)).toEqual([
      FILTER_NAME,
      router.name,
    ]);
    expect(names(result.config.static_resources.listeners[1].default_filter_chain)).toEqual([
      FILTER_NAME,
      router.name,
    ]);
    expect(names(result.config.static_resources.listeners[1].filter_chains[0])).toEqual([
      FILTER_NAME,
      router.name,
    ]);
    expect(result).toMatchObject({
      filteredListeners: ["d", "b"],
      inboundStatPrefixes: ["d", "b", "b_default"],
    });
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
