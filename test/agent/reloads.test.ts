// Reloads never cut: the old Envoy is stopped once it has finished what it serves, not by a timer.
import { connect } from "node:net";
import { describe, expect, it } from "vitest";
import { http1 } from "../filter/clients.ts";
import { localCluster } from "../support/envoy-bootstrap.ts";
import { freePort, inboundConfig, isAlive, startLastcall } from "../support/lastcall.ts";
import { agentSees, serving, upstreamForFile } from "../support/serving.ts";
import type { Json } from "../support/json.ts";

const app = upstreamForFile();
const LONG_MS = 12_000;

describe("a long request across a reload", () => {
  it("hot restart (SIGHUP): the 12 s request gets its 200; the parent is done right after it", async () => {
    const { lc, port, status, envoyPid } = await serving(app.port, []);
    const startedAt = Date.now();
    const long = http1(port, `/delay?ms=${LONG_MS}`);
    await agentSees(status, 1);
    lc.signal("SIGHUP");
    await lc.event("ready", (e) => e.epoch === 1);
    const drained = await lc.event("epoch_drained", undefined, 30_000);
    expect(await long).toEqual({ status: 200, reset: false });
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(LONG_MS);
    expect(drained).toMatchObject({
      epochs: [0],
      reason: "inflight_zero",
      inflight_at_stop: 0,
      bytes_unsent_at_stop: 0,
    });
    // The child serves on (on a port of its own: the test's listener asks for port 0).
    expect((await http1(await lc.listenerPort("ingress"), "/")).status).toBe(200);
    // The finished parent is ended by its child as the child shuts down (Envoy's own order).
    lc.signal("SIGTERM");
    expect(await lc.event("terminated")).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
    });
    expect(await lc.event("epoch_exit", (e) => e.pid === envoyPid)).toMatchObject({
      epoch: 0,
      drain_reason: "inflight_zero",
      inflight_at_stop: 0,
    });
    expect(await lc.exited).toEqual({ code: 0, signal: null });
    expect(isAlive(envoyPid)).toBe(false);
  });

  it("cold reload (--no-hot-restart): the old Envoy finishes the 12 s request before it is replaced", async () => {
    const { lc, port, status, envoyPid } = await serving(app.port, ["--no-hot-restart"]);
    const long = http1(port, `/delay?ms=${LONG_MS}`);
    await agentSees(status, 1);
    lc.signal("SIGHUP");
    expect(await long).toEqual({ status: 200, reset: false });
    expect(await lc.event("epoch_drained", undefined, 30_000)).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
    });
    await lc.event("ready", (e) => e.pid !== envoyPid);
    expect((await http1(await lc.listenerPort("ingress"), "/")).status).toBe(200);
  });

  it("a reload drain limit (--parent-shutdown) is said with what it cut", async () => {
    const { lc, port, status } = await serving(app.port, ["--parent-shutdown", "2s"]);
    const held = http1(port, "/hold");
    await app.until((a) => a.held === 1);
    await agentSees(status, 1);
    lc.signal("SIGHUP");
    const drained = await lc.event("epoch_drained", undefined, 30_000);
    expect(drained).toMatchObject({ epochs: [0], reason: "deadline", inflight_at_stop: 1 });
    expect(await lc.event("epoch_exit", (e) => e.epoch === 0)).toMatchObject({
      drain_reason: "deadline",
      inflight_at_stop: 1,
    });
    expect((await held).reset).toBe(true);
  });

  it("an app's pooled connection through an OUTBOUND tcp_proxy does not hold a hot parent", async () => {
    const [port, egressPort] = [await freePort(), await freePort()];
    const config = inboundConfig({ upstreamPort: app.port }) as Json;
    config.static_resources.listeners[0].address.socket_address.port_value = port;
    config.static_resources.listeners.push({
      name: "egress_db",
      traffic_direction: "OUTBOUND",
      address: { socket_address: { address: "127.0.0.1", port_value: egressPort } },
      filter_chains: [{
        filters: [{
          name: "envoy.filters.network.tcp_proxy",
          typed_config: {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
            stat_prefix: "egress_db",
            cluster: "db",
          },
        }],
      }],
    });
    config.static_resources.clusters.push(localCluster("db", app.port));
    const lc = startLastcall(config, {});
    await lc.event("ready");
    const pooled = connect({ host: "127.0.0.1", port: egressPort }); // the app's database pool, idle
    await new Promise((done) => pooled.once("connect", done));
    try {
      lc.signal("SIGHUP");
      expect(await lc.event("epoch_drained", undefined, 30_000)).toMatchObject({
        epochs: [0],
        reason: "inflight_zero",
        inflight_at_stop: 0,
      });
    } finally {
      pooled.destroy();
    }
  });
});

// lastcall closes a hot parent's idle connections (its overload manager scales their idle timeout
// to 0). Envoy then still answers on one for its connection manager's `drain_timeout` (5 s), and
// holds it unread for its delayed close (3 s, lastcall's) before a reset: a request sent in those
// 3 s never reaches the app. lastcall cannot save it, and says so. Sent 6.5 s after the drain
// began: past the 5 s, well before the 8.
describe("an idle keep-alive connection to a hot parent", () => {
  it("a request sent on it while Envoy holds it for its delayed close gets a reset, and epoch_drained counts it (unread_at_close)", async () => {
    const { lc, port } = await serving(app.port, []);
    const socket = connect(port, "127.0.0.1");
    await new Promise((done) => socket.once("connect", done));
    const next = () =>
      new Promise<string>((done) => {
        socket.once("data", (chunk) => done(String(chunk).split("\r\n")[0]));
        socket.once("error", (error: NodeJS.ErrnoException) => done(error.code ?? "error"));
        socket.once("close", () => done("closed"));
        socket.write("GET / HTTP/1.1\r\nhost: app\r\n\r\n");
      });
    expect(await next()).toBe("HTTP/1.1 200 OK");
    lc.signal("SIGHUP");
    await lc.event("epoch_draining");
    await new Promise((done) => setTimeout(done, 6500));
    expect(await next()).toBe("ECONNRESET");
    expect(await lc.event("epoch_drained", undefined, 30_000)).toMatchObject({
      epochs: [0],
      inflight_at_stop: 0,
      unread_at_close: 1,
    });
    lc.signal("SIGTERM");
    expect(await lc.event("epoch_exit", (e) => e.epoch === 0)).toMatchObject({
      unread_at_close: 1,
    });
  });
});
