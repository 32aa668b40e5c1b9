// A user's listener that can reach lastcall's status port: control requests carried by a supervised
// Envoy are refused, probes and reports work.
import { request } from "node:http";
import { describe, expect, it } from "vitest";
import { http1 } from "../filter/clients.ts";
import { waitFor } from "../support/envoy.ts";
import { freePort, inboundConfig, startLastcall, type TestLastcall } from "../support/lastcall.ts";
import { agentSees, agentState, upstreamForFile } from "../support/serving.ts";
import type { Json } from "../support/json.ts";

const app = upstreamForFile();

const DFP_CACHE = { name: "dfp", dns_lookup_family: "V4_ONLY" };

/**
 * The user's config: the test's inbound listener, plus routes chosen by request header: `x-cluster`
 * names the cluster (cluster_header), `x-agent` goes to `lastcall_agent`, `x-status` to the user's
 * cluster `status` (127.0.0.1:statusPort), `x-dfp` through a dynamic forward proxy to the Host.
 */
function hostileConfig(statusPort: number): Record<string, unknown> {
  const config = inboundConfig({ upstreamPort: app.port }) as {
    static_resources: {
      listeners: Array<{ filter_chains: Array<{ filters: Array<{ typed_config: Json }> }> }>;
      clusters: unknown[];
    };
  };
  const hcm = config.static_resources.listeners[0].filter_chains[0].filters[0].typed_config;
  const when = (header: string) => ({
    prefix: "/",
    headers: [{ name: header, present_match: true }],
  });
  hcm.route_config.virtual_hosts[0].routes = [
    { match: when("x-cluster"), route: { cluster_header: "x-cluster" } },
    { match: when("x-agent"), route: { cluster: "lastcall_agent" } },
    { match: when("x-status"), route: { cluster: "status" } },
    { match: when("x-dfp"), route: { cluster: "dfp" } },
    ...hcm.route_config.virtual_hosts[0].routes,
  ];
  hcm.http_filters.unshift({
    name: "envoy.filters.http.dynamic_forward_proxy",
    typed_config: {
      "@type":
        "type.googleapis.com/envoy.extensions.filters.http.dynamic_forward_proxy.v3.FilterConfig",
      dns_cache_config: DFP_CACHE,
    },
  });
  config.static_resources.clusters.push(
    {
      name: "status",
      type: "STATIC",
      connect_timeout: "1s",
      load_assignment: {
        cluster_name: "status",
        endpoints: [{
          lb_endpoints: [{
            endpoint: {
              address: { socket_address: { address: "127.0.0.1", port_value: statusPort } },
            },
          }],
        }],
      },
    },
    {
      name: "dfp",
      connect_timeout: "1s",
      lb_policy: "CLUSTER_PROVIDED",
      cluster_type: {
        name: "envoy.clusters.dynamic_forward_proxy",
        typed_config: {
          "@type":
            "type.googleapis.com/envoy.extensions.clusters.dynamic_forward_proxy.v3.ClusterConfig",
          dns_cache_config: DFP_CACHE,
        },
      },
    },
  );
  return config;
}

/** POSTs (or `method`) `path` to 127.0.0.1:`port` with `headers`; resolves with the status and body. */
function post(
  port: number,
  path: string,
  headers: Record<string, string> = {},
  body = "",
  method = "POST",
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({
      host: "127.0.0.1",
      port,
      path,
      method,
      agent: false,
      headers: { "content-type": "application/json", ...headers },
    }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (chunk) => (text += chunk));
      res.on("end", () => resolve({ status: res.statusCode!, body: text }));
    });
    req.on("error", reject);
    req.end(body);
  });
}

/** lastcall on its defaults (status on a fixed port) in front of the hostile config, serving and reporting. */
async function start(): Promise<
  { lc: TestLastcall; port: number; status: string; statusPort: number; envoyPid: number }
> {
  const statusPort = await freePort();
  const lc = startLastcall(hostileConfig(statusPort), {
    args: ["--status-port", String(statusPort)],
  });
  const ready = await lc.event("ready");
  const status = await lc.statusUrl();
  expect(status).toBe(`http://127.0.0.1:${statusPort}`);
  await waitFor(
    async () => ((await agentState(status)).filter === "reporting" ? true : undefined),
    { what: "the filter's first report" },
  );
  return {
    lc,
    port: await lc.listenerPort("ingress"),
    status,
    statusPort,
    envoyPid: Number(ready.pid),
  };
}

/** Every control request through Envoy by `route` is refused with 403 naming the route and Envoy's pid; lastcall stays ready. */
async function refusedThroughEnvoy(
  s: { lc: TestLastcall; port: number; status: string; envoyPid: number },
  route: Record<string, string>,
): Promise<void> {
  // The route really reaches the status server: a probe through it is answered by lastcall.
  const probe = await post(s.port, "/healthz/live", route, "", "GET");
  expect(probe, `${JSON.stringify(route)} must reach the status server`).toEqual({
    status: 200,
    body: JSON.stringify({ live: true }),
  });
  for (
    const [path, body] of [["/quitquitquit", ""], ["/drain", ""], [
      "/v1/app",
      JSON.stringify({ state: "running", id: "x" }),
    ]]
  ) {
    const res = await post(s.port, path, route, body);
    expect(res.status, `${path} via ${JSON.stringify(route)}`).toBe(403);
    expect(JSON.parse(res.body)).toEqual({
      error:
        `POST ${path} is not accepted through Envoy: the connection comes from Envoy pid ${s.envoyPid}`,
    });
  }
  const ready = await fetch(`${s.status}/healthz/ready`);
  expect(ready.status).toBe(200);
  expect((await agentState(s.status)).phase).toBe("running");
  expect(s.lc.events.map((e) => e.event)).not.toContain("drain_start");
  expect(s.lc.events.map((e) => e.event)).not.toContain("terminate");
}

describe("control endpoints are unreachable through Envoy, whatever the user's routes", () => {
  it("cluster_header and a plain route to lastcall_agent: 403; reports still count, a held request ends in inflight_zero at SIGTERM", async () => {
    const s = await start();
    await refusedThroughEnvoy(s, { "x-cluster": "lastcall_agent" });
    await refusedThroughEnvoy(s, { "x-agent": "1" });
    // The filter's reports, which Envoy carries on the same cluster, still count.
    const held = http1(s.port, "/hold");
    await app.until((a) => a.held === 1);
    await agentSees(s.status, 1);
    s.lc.signal("SIGTERM");
    await s.lc.event("listeners_draining");
    app.release();
    expect(await held).toEqual({ status: 200, reset: false });
    expect(await s.lc.event("terminated")).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
    });
    expect((await s.lc.exited).code).toBe(0);
  });

  it("the user's own cluster to the status port, and a dynamic forward proxy to it: 403; a direct loopback POST /drain still works", async () => {
    const s = await start();
    await refusedThroughEnvoy(s, { "x-status": "1" });
    await refusedThroughEnvoy(s, { "x-dfp": "1", host: `127.0.0.1:${s.statusPort}` });
    const drain = await post(s.statusPort, "/drain");
    expect(drain).toEqual({ status: 200, body: JSON.stringify({ draining: true }) });
    const ready = await fetch(`${s.status}/healthz/ready`);
    expect(ready.status).toBe(503);
    expect(await ready.json()).toEqual({ ready: false, reason: "draining" });
    expect((await s.lc.stop()).code).toBe(0);
  });
});
