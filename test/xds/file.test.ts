// LDS from a file: lastcall follows the user's file and gives Envoy a rewritten copy, renamed
// into place so Envoy's file watch picks up each version. A listener with only a default filter
// chain, an outbound listener and a tcp_proxy listener all get the filter.
import { mkdtempSync, renameSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, expect, it } from "vitest";
import YAML from "yaml";
import { localCluster } from "../support/envoy-bootstrap.ts";
import { waitFor } from "../support/envoy.ts";
import { freePort, startLastcall, stopAllLastcalls } from "../support/lastcall.ts";
import { startUpstreamApp, type UpstreamApp } from "../support/upstream-app.ts";
import { dumpedHttpFilters, get, hcm, inflightGauge, route } from "./resources.ts";

const LISTENER = "type.googleapis.com/envoy.config.listener.v3.Listener";
let app: UpstreamApp;
beforeAll(async () => (app = await startUpstreamApp()));
afterAll(() => app.close());
afterEach(stopAllLastcalls);

function ldsFile(version: string, ports: { edge: number; egress: number; tcp: number }): string {
  const address = (port: number) => ({
    socket_address: { address: "127.0.0.1", port_value: port },
  });
  return YAML.stringify({
    version_info: version,
    resources: [
      // Only a default filter chain.
      {
        "@type": LISTENER,
        name: "edge",
        traffic_direction: "INBOUND",
        address: address(ports.edge),
        default_filter_chain: { filters: [hcm("edge", { inline: route("r", version) })] },
      },
      {
        "@type": LISTENER,
        name: "egress",
        traffic_direction: "OUTBOUND",
        address: address(ports.egress),
        filter_chains: [{ filters: [hcm("egress", { inline: route("r", version) })] }],
      },
      {
        "@type": LISTENER,
        name: "tcp",
        traffic_direction: "INBOUND",
        address: address(ports.tcp),
        filter_chains: [{
          filters: [{
            name: "envoy.filters.network.tcp_proxy",
            typed_config: {
              "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
              stat_prefix: "tcp",
              cluster: "app",
            },
          }],
        }],
      },
    ],
  });
}

/** Replaces the file the way Kubernetes and careful editors do: write beside it, rename. */
function replace(path: string, content: string): void {
  writeFileSync(`${path}.new`, content);
  renameSync(`${path}.new`, path);
}

it("rewrites listeners from an LDS file, follows its changes, and drains to the pushed zero", async () => {
  const dir = mkdtempSync(join(tmpdir(), "lastcall-lds-"));
  const lds = join(dir, "lds.yaml");
  const ports = { edge: await freePort(), egress: await freePort(), tcp: await freePort() };
  writeFileSync(lds, ldsFile("1", ports));
  const lc = startLastcall({
    node: { id: "file-node", cluster: "test" },
    dynamic_resources: {
      lds_config: {
        resource_api_version: "V3",
        path_config_source: { path: lds, watched_directory: { path: dir } },
      },
    },
    static_resources: { clusters: [localCluster("app", app.port)] },
  }, { args: ["--min-drain", "0s"] });
  const start = await lc.event("start");
  expect(start.xds).toEqual([`LDS file ${lds}`]);
  expect(start.counted_by_stats).toBeUndefined();
  await lc.event("ready");
  const first = await waitFor(async () => (await get(ports.edge, "/").catch(() => undefined)), {
    what: "the file's listener to answer",
  });
  expect(first.headers["x-version"]).toBe("1");
  const admin = lc.adminUrl();
  expect((await dumpedHttpFilters(admin, "edge"))[0][0].name).toBe("lastcall_inflight");
  // Outbound listeners are counted too (the drain waits for the app's calls out).
  expect((await dumpedHttpFilters(admin, "egress"))[0][0].name).toBe("lastcall_inflight");
  const dump = await fetch(`${admin}/config_dump?resource=dynamic_listeners`).then((r) =>
    r.json()
  ) as {
    configs: Array<
      {
        name: string;
        active_state: { listener: { filter_chains: Array<{ filters: Array<{ name: string }> }> } };
      }
    >;
  };
  const tcp = dump.configs.find((c) => c.name === "tcp")!.active_state.listener.filter_chains[0]
    .filters.map((f) => f.name);
  expect(tcp).toEqual(["lastcall_inflight_tcp", "envoy.filters.network.tcp_proxy"]);

  replace(lds, ldsFile("2", ports));
  await waitFor(
    async () => ((await get(ports.edge, "/")).headers["x-version"] === "2" ? true : undefined),
    { what: "version 2 of the file", timeoutMs: 15_000 },
  );
  expect((await dumpedHttpFilters(admin, "edge"))[0][0].name).toBe("lastcall_inflight");

  // A TCP connection through the tcp_proxy listener is counted (in the TCP variant's gauge).
  const socket = connect(ports.tcp, "127.0.0.1");
  await new Promise((done) => socket.once("connect", done));
  await waitFor(async () => ((await inflightGauge(admin)) === 1 ? true : undefined), {
    what: "the TCP connection to be counted",
  });
  socket.destroy();
  await waitFor(async () => ((await inflightGauge(admin)) === 0 ? true : undefined), {
    what: "the TCP connection to end",
  });

  const held = get(ports.edge, "/hold");
  await app.until((a) => a.held === 1);
  expect(await inflightGauge(admin)).toBe(1);
  lc.signal("SIGTERM");
  await lc.event("drain_start");
  app.release();
  expect((await held).status).toBe(200);
  const terminated = await lc.event("terminated");
  expect(terminated.reason).toBe("inflight_zero");
  expect(lc.events.some((e) => e.event === "drain_fallback")).toBe(false);
});
