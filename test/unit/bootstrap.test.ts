// deriveBootstrap: the Envoy config lastcall runs, derived from the user's. Admin on loopback or a
// Unix socket, the agent's cluster, the filter (HTTP and TCP variants) put into connection
// managers and tcp_proxy chains, the delayed close asked for, and nothing else changed. Which
// listeners count, and how: bootstrap-listeners.test.ts.
import { describe, expect, it } from "vitest";
import {
  AGENT_CLUSTER,
  BootstrapError,
  deriveBootstrap,
  FILTER_NAME,
} from "../../agent/envoy/bootstrap.ts";
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
    const clusters = (config as Json).static_resources.clusters as Json[];
    expect(clusters.map((c) => c.name)).toEqual(["app", AGENT_CLUSTER]);
    expect(clusters[1].load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address)
      .toEqual({ address: "10.0.0.5", port_value: 4000 });
  });

  it("refuses a config that already has the agent's cluster name", () => {
    expect(() =>
      deriveBootstrap({ static_resources: { clusters: [{ name: AGENT_CLUSTER }] } }, options)
    ).toThrow(/already has a cluster named lastcall_agent/);
  });

  it("configures the wasm filter to fail open with the plugin configuration as JSON", () => {
    const { config } = deriveBootstrap(
      { static_resources: { listeners: [listener("in")] } },
      withFilter,
    );
    const wasm =
      (config as Json).static_resources.listeners[0].filter_chains[0].filters[0].typed_config
        .http_filters[0]
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
    http.filter_chains[0].filters[0].typed_config.http_filters = [{ name: "cors" }, theirs, ROUTER];
    const theirsTcp = { name: `${FILTER_NAME}_tcp`, typed_config: {} };
    const { config } = deriveBootstrap({
      static_resources: { listeners: [http, listener("tcp", "INBOUND", [theirsTcp, tcpProxy])] },
    }, withFilter);
    const filters =
      (config as Json).static_resources.listeners[0].filter_chains[0].filters[0].typed_config
        .http_filters;
    expect(filters.map((f: Json) => f.name)).toEqual(["cors", FILTER_NAME, ROUTER.name]);
    expect(filters[1].typed_config.config.configuration.value).toBe(
      JSON.stringify({ heartbeat_ms: 1000 }),
    );
    const tcp = (config as Json).static_resources.listeners[1].filter_chains[0].filters;
    expect(tcp.map((f: Json) => f.name)).toEqual([`${FILTER_NAME}_tcp`, tcpProxy.name]);
    expect(tcp[0].typed_config.config.vm_config.vm_id).toBe("lastcall_inflight_tcp");
  });

  it("without a filter (--no-filter) leaves the connection managers alone but still knows their prefixes", () => {
    const result = deriveBootstrap(
      { static_resources: { listeners: [listener("in", "INBOUND")] } },
      options,
    );
    expect(httpFilterNames(result.config, 0)).toEqual([ROUTER.name]);
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
    const filters = (result.config as Json).static_resources.listeners[0].filter_chains[0].filters;
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
    expect((result.config as Json).static_resources.listeners[0].filter_chains[0].filters).toEqual([
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
    expect((config as Json).static_resources.listeners[0].address).toEqual(
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
    expect(names((result.config as Json).static_resources.listeners[0].default_filter_chain))
      .toEqual([
        FILTER_NAME,
        ROUTER.name,
      ]);
    expect(names((result.config as Json).static_resources.listeners[1].default_filter_chain))
      .toEqual([
        FILTER_NAME,
        ROUTER.name,
      ]);
    expect(names((result.config as Json).static_resources.listeners[1].filter_chains[0])).toEqual([
      FILTER_NAME,
      ROUTER.name,
    ]);
    expect(result).toMatchObject({
      filteredListeners: ["d", "b"],
      inboundStatPrefixes: ["d", "b", "b_default"],
    });
  });
});
