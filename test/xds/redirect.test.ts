// Which listener sources lastcall redirects to its proxy, and what the effective bootstrap then
// says; sources it cannot relay stay as they are and are counted by Envoy's stats.
import { describe, expect, it } from "vitest";
import { deriveBootstrap } from "../../agent/envoy/bootstrap.ts";
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname } from "node:path";
import { xdsRedirectFor } from "../../agent/xds/per-envoy.ts";
import { XDS_CLUSTER, XDS_TOKEN_HEADER } from "../../agent/xds/redirect.ts";
import { xdsBootstrap } from "./resources.ts";
import type { Json } from "../support/json.ts";

const options = {
  adminPort: 0,
  statusAddress: "127.0.0.1",
  statusPort: 15020,
  filter: { wasmPath: "/f.wasm", pluginConfig: { instance: "1-1-0" } },
  xds: {
    socketPath: "/run/lc/envoy.xds.sock",
    token: "secret",
    fileBase: "/run/lc/envoy-g1-epoch0-lds",
  },
};

describe("deriveBootstrap with an xDS proxy", () => {
  it("sends ADS to lastcall's cluster with the token, and relays to the original cluster", () => {
    const user = xdsBootstrap({ xdsPort: 18000, service: "ads", variant: "delta" });
    const b = deriveBootstrap(user, options);
    const config = b.config as Json;
    expect(config.dynamic_resources.ads_config).toEqual({
      api_type: "DELTA_GRPC",
      transport_api_version: "V3",
      grpc_services: [{
        envoy_grpc: { cluster_name: XDS_CLUSTER },
        initial_metadata: [{ key: XDS_TOKEN_HEADER, value: "secret" }],
      }],
    });
    const cluster = config.static_resources.clusters.find((c: Json) => c.name === XDS_CLUSTER);
    expect(cluster.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address).toEqual({
      pipe: { path: "/run/lc/envoy.xds.sock" },
    });
    expect(b.unseenListeners).toEqual([]);
    expect(b.xds?.upstream).toEqual({
      source: "ads",
      name: "xds_cluster",
      authority: "xds_cluster",
      address: { host: "127.0.0.1", port: 18000 },
    });
    // The user's own cluster stays (other sources may use it); the input is not modified.
    expect(config.static_resources.clusters.some((c: Json) => c.name === "xds_cluster")).toBe(true);
    expect((user as Json).dynamic_resources.ads_config.grpc_services[0].envoy_grpc.cluster_name)
      .toBe("xds_cluster");
  });

  it("redirects only the LDS api_config_source; CDS keeps going to the control plane directly", () => {
    const b = deriveBootstrap(
      xdsBootstrap({ xdsPort: 18000, service: "lds", variant: "sotw" }),
      options,
    );
    const dynamic = (b.config as Json).dynamic_resources;
    expect(dynamic.lds_config.api_config_source.grpc_services[0].envoy_grpc.cluster_name).toBe(
      XDS_CLUSTER,
    );
    expect(dynamic.cds_config.api_config_source.grpc_services[0].envoy_grpc.cluster_name).toBe(
      "xds_cluster",
    );
    expect(b.xds?.relayed).toEqual(["LDS (dynamic_resources.lds_config.api_config_source)"]);
  });

  it("keeps the original TLS settings and authority for the relay", () => {
    const tls = {
      name: "tls",
      typed_config: {
        "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
        sni: "cp",
      },
    };
    const user = xdsBootstrap({
      xdsPort: 18000,
      service: "ads",
      variant: "sotw",
      transportSocket: tls,
    }) as Json;
    user.dynamic_resources.ads_config.grpc_services[0].envoy_grpc.authority = "contour";
    const b = deriveBootstrap(user, options);
    expect(b.xds?.upstream).toMatchObject({ authority: "contour", tls: tls.typed_config });
  });

  it("points LDS from a file at a copy lastcall writes", () => {
    const b = deriveBootstrap({
      dynamic_resources: {
        lds_config: {
          path_config_source: {
            path: "/etc/envoy/lds.yaml",
            watched_directory: { path: "/etc/envoy" },
          },
        },
      },
    }, options);
    expect((b.config as Json).dynamic_resources.lds_config).toEqual({
      path_config_source: { path: "/run/lc/envoy-g1-epoch0-lds.json" },
    });
    expect(b.xds?.files).toEqual([{
      source: "/etc/envoy/lds.yaml",
      copy: "/run/lc/envoy-g1-epoch0-lds.json",
      format: "yaml",
    }]);
    expect((b.config as Json).static_resources.clusters.some((c: Json) => c.name === XDS_CLUSTER))
      .toBe(false);
  });

  it("leaves what it cannot relay alone and counts it by stats", () => {
    const rest = {
      dynamic_resources: {
        lds_config: { api_config_source: { api_type: "REST", cluster_names: ["cp"] } },
      },
    };
    const b = deriveBootstrap(rest, options);
    expect((b.config as Json).dynamic_resources).toEqual(rest.dynamic_resources);
    expect(b.unseenListeners).toEqual([
      "LDS (dynamic_resources.lds_config.api_config_source) (api_type REST)",
    ]);
    const missing = xdsBootstrap({ xdsPort: 1, service: "ads", variant: "sotw" }) as Json;
    missing.static_resources.clusters = [];
    expect(deriveBootstrap(missing, options).unseenListeners).toEqual([
      "LDS over ADS (dynamic_resources.ads_config) (envoy_grpc cluster xds_cluster is not a static cluster)",
    ]);
    const text = { dynamic_resources: { lds_config: { path: "/etc/envoy/lds.pb_text" } } };
    expect(deriveBootstrap(text, options).unseenListeners).toEqual([
      "LDS file /etc/envoy/lds.pb_text (only .json, .yaml and .pb files are rewritten)",
    ]);
  });

  it("does not redirect without the filter (--no-filter)", () => {
    const b = deriveBootstrap(xdsBootstrap({ xdsPort: 18000, service: "ads", variant: "sotw" }), {
      ...options,
      filter: undefined,
    });
    expect(b.xds).toBeUndefined();
    expect(b.unseenListeners).toEqual(["LDS (dynamic_resources.lds_config)"]);
  });

  it("relays google_grpc targets with their SSL credentials", () => {
    const user = {
      dynamic_resources: {
        ads_config: {
          api_type: "GRPC",
          grpc_services: [{
            timeout: "5s",
            google_grpc: {
              target_uri: "cp.example:443",
              stat_prefix: "ads",
              channel_credentials: { ssl_credentials: { root_certs: { filename: "/ca" } } },
            },
          }],
        },
        lds_config: { ads: {} },
      },
    };
    const b = deriveBootstrap(user, options);
    expect(b.xds?.upstream).toEqual({
      source: "ads",
      name: "cp.example:443",
      authority: "cp.example:443",
      address: { host: "cp.example", port: 443 },
      googleSsl: { root_certs: { filename: "/ca" } },
    });
    expect((b.config as Json).dynamic_resources.ads_config.grpc_services[0]).toEqual({
      timeout: "5s",
      envoy_grpc: { cluster_name: XDS_CLUSTER },
      initial_metadata: [{ key: XDS_TOKEN_HEADER, value: "secret" }],
    });
  });
});

describe("xdsRedirectFor", () => {
  it("puts the socket in the run folder, or in a private temp folder when that path is too long for a socket", async () => {
    const short = await xdsRedirectFor("/run/lc", "envoy-g1-epoch0");
    expect(short).toMatchObject({
      socketPath: "/run/lc/envoy-g1-epoch0.xds.sock",
      fileBase: "/run/lc/envoy-g1-epoch0-lds",
    });
    expect(short.token).toMatch(/^[0-9a-f]{32}$/);
    const long = await xdsRedirectFor(`/run/${"x".repeat(120)}`, "envoy-g1-epoch0");
    expect(dirname(dirname(long.socketPath))).toBe(tmpdir());
    expect(long.socketPath).toMatch(/\/lastcall-xds-[0-9a-f]{12}\/xds\.sock$/);
    expect(long.socketPath.length).toBeLessThanOrEqual(100);
    // Named only: the folder is made when a proxy serves there (an Envoy without LDS leaves nothing).
    expect(existsSync(dirname(long.socketPath))).toBe(false);
  });
});
