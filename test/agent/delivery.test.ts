// "Done" is the client's last byte: a slow reader's download is delivered in full before lastcall
// stops Envoy, over HTTP/1.1, a unix socket and a reload, and what the stop cannot look at is
// said. HTTP/2 clients that read slowly by flow control: delivery-http2.test.ts.
import { execFileSync } from "node:child_process";
import { Agent, request } from "node:http";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { readTcpTable, TCP_STATE } from "../../agent/envoy/sockets.ts";
import { httpBootstrap } from "../support/envoy-bootstrap.ts";
import { startEnvoy, waitFor } from "../support/envoy.ts";
import { inboundConfig, startLastcall, unixSocketConfig } from "../support/lastcall.ts";
import { http1 } from "../filter/clients.ts";
import {
  agentSees,
  agentState,
  type Serving,
  serving,
  upstreamForFile,
} from "../support/serving.ts";
import { slowDownload } from "../support/slow-reader.ts";
import { tempDir } from "../support/temp.ts";
import { acrossTwoHotRestarts, BODY, RATE } from "./delivery-support.ts";

const app = upstreamForFile();

/**
 * `flushSeen`: the drain must have waited for bytes after the stream ended (`drain_flushing`).
 * In inflight mode the filter's push comes as the stream ends, while its tail still sits in
 * Envoy's buffer and send queue. In requests mode the drain learns of the end on its next poll
 * of Envoy's stats (200 ms, more on a loaded machine); by then the reader's kernel may already
 * hold the whole tail (its receive window was open: seen in CI with ~3.7 MB left to read), and
 * there is nothing left to flush or to lose. Every byte must arrive either way.
 */
async function slowReaderAcrossSigterm({ lc, port }: Serving, flushSeen: boolean) {
  const download = slowDownload(port, `/bytes?n=${BODY}`, RATE);
  await download.reached(RATE); // about 1 s in
  lc.signal("SIGTERM");
  const read = await download.done;
  const terminated = await lc.event("terminated");
  expect(read).toEqual({ status: 200, expected: BODY, received: BODY, endedBy: "fin" });
  expect(terminated).toMatchObject({ inflight_at_stop: 0, bytes_unsent_at_stop: 0 });
  // The stream ended for Envoy while bytes were still on their way: the drain waited for them.
  if (flushSeen) expect(lc.events.map((e) => e.event)).toContain("drain_flushing");
  expect(await lc.exited).toEqual({ code: 0, signal: null });
  return terminated;
}

describe("a slow reader across SIGTERM", () => {
  it("gets every byte of 30 MB at 3 MB/s, on the defaults (inflight mode)", async () => {
    const terminated = await slowReaderAcrossSigterm(await serving(app.port, []), true);
    expect(terminated).toMatchObject({ mode: "inflight", reason: "inflight_zero" });
  });

  it("gets every byte in requests mode too", async () => {
    const terminated = await slowReaderAcrossSigterm(
      await serving(app.port, ["--drain-mode", "requests"]),
      false,
    );
    expect(terminated).toMatchObject({ mode: "requests", reason: "requests_zero" });
  });
});

describe("a slow reader on a unix-socket listener", () => {
  it("gets every byte of 30 MB: the drain waits for Envoy's own write buffer", async () => {
    const { config, path } = unixSocketConfig(app.port);
    const lc = startLastcall(config);
    expect(await lc.event("start")).toMatchObject({
      listeners: [{ name: "ingress", delivery: "envoy_buffers" }],
    });
    await lc.event("ready");
    const status = await lc.statusUrl();
    await waitFor(
      async () => ((await agentState(status)).filter === "reporting" ? true : undefined),
      { what: "the filter's first report" },
    );
    const download = slowDownload({ path }, `/bytes?n=${BODY}`, RATE);
    await download.reached(RATE);
    lc.signal("SIGTERM");
    const read = await download.done;
    expect(read).toEqual({ status: 200, expected: BODY, received: BODY, endedBy: "fin" });
    expect(await lc.event("terminated")).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
      bytes_unsent_at_stop: 0,
    });
    expect(lc.events.map((e) => e.event)).toContain("drain_flushing");
    expect(await lc.exited).toEqual({ code: 0, signal: null });
  });
});

// Outside any drain: an HTTP/1.1 response to `Connection: close` ends with Envoy's delayed close,
// a timer that runs while Envoy still flushes to a slow reader. Envoy's default (1 s) cut 14 of
// 180 readers of 4 MB at 1 MB/s here (docs/reliability.md); lastcall's 3 s, none of 120.
describe("HTTP/1.1 slow readers with Connection: close, no drain", () => {
  it("every reader of 20 gets every byte, on the defaults", async () => {
    const { lc, port } = await serving(app.port, []);
    const reads: Promise<unknown>[] = [];
    for (let i = 0; i < 20; i++) {
      reads.push(slowDownload(port, "/bytes?n=4000000", 1_000_000).done);
      await new Promise((next) => setTimeout(next, 150)); // staggered, as a client's arrivals
    }
    const whole = { status: 200, expected: 4_000_000, received: 4_000_000, endedBy: "fin" };
    expect(await Promise.all(reads)).toEqual(Array(20).fill(whole));
    lc.signal("SIGTERM");
    expect(await lc.exited).toEqual({ code: 0, signal: null });
  });
});

describe("a slow reader across a reload", () => {
  it("a cold reload (--no-hot-restart) stops the old Envoy only once the reader has every byte", async () => {
    const { lc, port, envoyPid } = await serving(app.port, ["--no-hot-restart"]);
    const download = slowDownload(port, `/bytes?n=${BODY}`, RATE);
    await download.reached(RATE);
    lc.signal("SIGHUP");
    const read = await download.done;
    expect(read).toEqual({ status: 200, expected: BODY, received: BODY, endedBy: "fin" });
    expect(await lc.event("epoch_drained", undefined, 30_000)).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
      bytes_unsent_at_stop: 0,
    });
    // No drain_flushing required: when the stream ends, the reader's kernel may already hold the
    // whole tail (a few MB), leaving nothing to flush; seen on a loaded machine.
    await lc.event("ready", (e) => e.pid !== envoyPid);
  });

  // The parent's admin went to its child, and a unix socket shows no queue: the parent's drain
  // waits while it still writes, then for the connection it wrote on to close. Only then may the
  // next hot restart start, which ends the parent (Envoy ends a grandparent as its child starts).
  it("two hot restarts on a unix-socket listener (defaults): the first parent's reader gets every byte", async () => {
    const { config, path } = unixSocketConfig(app.port);
    const { lc } = await serving(app.port, [], { config, listener: null });
    const download = slowDownload({ path }, `/bytes?n=${BODY}`, RATE);
    const { read, drained } = await acrossTwoHotRestarts(lc, download);
    expect(read).toEqual({ status: 200, expected: BODY, received: BODY, endedBy: "fin" });
    expect(drained).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
      bytes_unsent_at_stop: 0,
    });
  });

  it("SIGHUP then SIGTERM 30 ms later (defaults, hot restart): the reader still gets every byte", async () => {
    const { lc, port } = await serving(app.port, []);
    const download = slowDownload(port, `/bytes?n=${BODY}`, RATE);
    await download.reached(RATE);
    lc.signal("SIGHUP");
    await new Promise((done) => setTimeout(done, 30)); // the race itself, not a wait for an event
    lc.signal("SIGTERM");
    const read = await download.done;
    expect(read).toEqual({ status: 200, expected: BODY, received: BODY, endedBy: "fin" });
    expect(await lc.event("terminated")).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
      bytes_unsent_at_stop: 0,
    });
    expect(await lc.exited).toEqual({ code: 0, signal: null });
  });
});

// A hot-restart parent's admin went to its child: its own buffers (HTTP/2 windows, write
// buffers) cannot be read. While it still holds a connection, the stop says so instead of a 0.
describe("what the stop cannot look at", () => {
  it("a hot-restart parent still holding a connection at the deadline: named, no bytes_unsent_at_stop", async () => {
    const { lc, port, status } = await serving(app.port, ["--grace", "9s"]);
    const held = http1(port, "/hold");
    await agentSees(status, 1);
    lc.signal("SIGHUP");
    await lc.event("epoch_draining");
    lc.signal("SIGTERM");
    const terminated = await lc.event("terminated");
    expect(terminated).toMatchObject({
      reason: "deadline",
      inflight_at_stop: 1,
      delivery_unchecked: [expect.stringContaining("epoch 0")],
    });
    expect(terminated).not.toHaveProperty("bytes_unsent_at_stop");
    app.release();
    await held.catch(() => undefined);
  });

  // A unix socket shows no queue: the parent's unix connections are waited for only while it
  // writes. An idle pooled one, its last response long written, does not hold the stop.
  it("a hot-restart parent's idle unix-socket keep-alive: not waited for, named unchecked", async () => {
    const { config, path } = unixSocketConfig(app.port);
    const { lc } = await serving(app.port, [], { config, listener: null });
    const pool = new Agent({ keepAlive: true });
    const get = () =>
      new Promise<number>((done, fail) => {
        request({ socketPath: path, path: "/", agent: pool }, (response) => {
          response.resume().on("end", () => done(response.statusCode!));
        }).on("error", fail).end();
      });
    expect(await get()).toBe(200);
    lc.signal("SIGHUP");
    await lc.event("epoch", (e) => e.epoch === 1);
    expect(await get()).toBe(200); // on the pooled connection: the parent's
    lc.signal("SIGTERM");
    const terminated = await lc.event("terminated");
    expect(terminated).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
      delivery_unchecked: [expect.stringContaining("epoch 0")],
    });
    expect(lc.events.map((e) => e.event)).not.toContain("drain_flushing");
    pool.destroy();
  });

  // No HTTP/3 client here (Node has none): with no QUIC connection open, nothing is out of sight.
  it("an HTTP/3 (QUIC) listener is named unchecked at start; with no QUIC connection open the stop can say 0", async () => {
    const dir = tempDir("lastcall-quic-");
    execFileSync("openssl", [
      "req",
      "-x509",
      "-newkey",
      "rsa:2048",
      "-nodes",
      "-days",
      "1",
      "-subj",
      "/CN=localhost",
      "-keyout",
      join(dir, "key.pem"),
      "-out",
      join(dir, "cert.pem"),
    ], { stdio: "ignore" });
    const config = inboundConfig({ upstreamPort: app.port }) as {
      static_resources: { listeners: Array<Record<string, unknown>> };
    };
    const tcp = config.static_resources.listeners[0] as {
      filter_chains: Array<{ filters: Array<{ typed_config: Record<string, unknown> }> }>;
    };
    const hcm = {
      ...tcp.filter_chains[0].filters[0].typed_config,
      codec_type: "HTTP3",
      stat_prefix: "quic",
    };
    config.static_resources.listeners.push({
      name: "quic",
      address: { socket_address: { protocol: "UDP", address: "127.0.0.1", port_value: 0 } },
      udp_listener_config: { quic_options: {} },
      filter_chains: [{
        transport_socket: {
          name: "envoy.transport_sockets.quic",
          typed_config: {
            "@type":
              "type.googleapis.com/envoy.extensions.transport_sockets.quic.v3.QuicDownstreamTransport",
            downstream_tls_context: {
              common_tls_context: {
                tls_certificates: [{
                  certificate_chain: { filename: join(dir, "cert.pem") },
                  private_key: { filename: join(dir, "key.pem") },
                }],
              },
            },
          },
        },
        filters: [{ name: "envoy.filters.network.http_connection_manager", typed_config: hcm }],
      }],
    });
    const lc = startLastcall(config);
    expect(await lc.event("start")).toMatchObject({
      listeners: [{ name: "ingress", delivery: "tcp_queue" }, {
        name: "quic",
        counted: "filter",
        delivery: "unchecked",
      }],
    });
    await lc.event("ready");
    lc.signal("SIGTERM");
    expect(await lc.event("terminated")).toMatchObject({
      reason: "inflight_zero",
      bytes_unsent_at_stop: 0,
    });
  });
});

// What docs/filter.md says of bytes still in the kernel's send queue when Envoy exits, measured:
// Envoy's exit closes the socket; the kernel keeps sending what it holds (the socket lingers in
// FIN_WAIT1) and ends with FIN after its last byte. What never left Envoy's own buffer is lost.
describe("bytes in the kernel's send queue when Envoy exits", () => {
  it("are all delivered after Envoy is gone; what Envoy itself still held is lost", async () => {
    const envoy = await startEnvoy(httpBootstrap({ upstreamPort: app.port }));
    const port = envoy.port("ingress");
    const download = slowDownload(port, `/bytes?n=${BODY}`, RATE);
    await download.reached(2 * RATE); // about 2 s in: Envoy's buffer and the kernel's are full
    await fetch(`${envoy.adminUrl}/quitquitquit`, { method: "POST" });
    await envoy.exited;
    // In this order: what the reader had, then what the kernel still holds for it (unacknowledged
    // bytes of the socket Envoy closed), so no byte is counted twice.
    const readAtExit = download.received();
    const orphan = (await readTcpTable())!.find((s) =>
      s.localPort === port && s.state !== TCP_STATE.listen
    );
    const heldByKernel = orphan?.txQueue ?? 0;
    const read = await download.done;
    console.log(
      `at Envoy's exit the kernel held ${heldByKernel} bytes for the reader (socket state ${orphan?.state}); ` +
        `it had read ${readAtExit}, got ${read.received} of ${read.expected} in the end, ended by ${read.endedBy}`,
    );
    expect(heldByKernel).toBeGreaterThan(0);
    expect(read.received).toBeGreaterThanOrEqual(readAtExit + heldByKernel);
    expect(read.endedBy).toBe("fin");
    expect(read.received).toBeLessThan(BODY); // the rest was still in Envoy's own buffer
  });
});
