// "Done" is the client's last byte, for HTTP/2 clients that read slowly by flow control: the rest
// waits in Envoy's HTTP/2 codec, not in the kernel's queue, and lastcall waits until it is read.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { localCluster } from "../support/envoy-bootstrap.ts";
import { type GrpcStreamServer, startGrpcStreamServer } from "../support/grpc-stream.ts";
import { inboundConfig } from "../support/lastcall.ts";
import { type Serving, serving, upstreamForFile } from "../support/serving.ts";
import {
  slowH2Download,
  type SlowStreamOptions,
  type SlowStreamRead,
} from "../support/slow-reader.ts";
import { acrossTwoHotRestarts, BODY, RATE } from "./delivery-support.ts";

const app = upstreamForFile();
let grpc: GrpcStreamServer;
beforeAll(async () => (grpc = await startGrpcStreamServer()));
afterAll(() => grpc.close());

/**
 * What the stop says of an HTTP/2 download: 0 unsent only when every byte reached the client's
 * app; with the client's connection still open at the stop, what it took but has not read is
 * not seen, and the stop says so instead.
 */
function saidTruly(terminated: Record<string, unknown>, read: SlowStreamRead, expected: number) {
  expect(terminated).toMatchObject({ inflight_at_stop: 0 });
  if (terminated.bytes_unsent_at_stop === 0) {
    expect(read).toMatchObject({ received: expected, endedBy: "end_stream" });
  } else {expect(terminated.delivery_unchecked).toEqual([
      expect.stringContaining("HTTP/2 connections open"),
    ]);}
}

// HTTP/2 throttles by flow control: the client's window, opened only as its app reads, holds the
// rest in Envoy's HTTP/2 codec (`http2.pending_send_bytes`), not in the kernel's queue; Envoy
// 1.40 ends the stream for the filter only once its END_STREAM left the codec.
describe("an HTTP/2 client that reads slowly, by flow control (16 KiB window)", () => {
  async function acrossSigterm(
    { lc, port }: Serving,
    path: string,
    options: SlowStreamOptions = {},
  ) {
    const download = slowH2Download(port, path, RATE, options);
    await download.reached(RATE);
    lc.signal("SIGTERM");
    const read = await download.done;
    const terminated = await lc.event("terminated");
    expect(await lc.exited).toEqual({ code: 0, signal: null });
    return { read, terminated };
  }

  it("gets every byte of 30 MB, END_STREAM included, on the defaults", async () => {
    const { read, terminated } = await acrossSigterm(
      await serving(app.port, []),
      `/bytes?n=${BODY}`,
    );
    expect(read).toEqual({ status: 200, expected: BODY, received: BODY, endedBy: "end_stream" });
    expect(terminated).toMatchObject({ reason: "inflight_zero" });
    saidTruly(terminated, read, BODY);
  });

  it("a gRPC server stream (h2 upstream) gets every message and its trailers", async () => {
    const config = inboundConfig({ upstreamPort: app.port }) as {
      static_resources: { clusters: unknown[] };
    };
    config.static_resources.clusters = [localCluster("app", grpc.port, { http2: true })];
    const [messages, size] = [3000, 10_000];
    // A server-streaming call: one empty request message, then the request half-closes.
    const call = {
      headers: { ":method": "POST", "content-type": "application/grpc", te: "trailers" },
      body: Buffer.alloc(5),
    };
    const { read, terminated } = await acrossSigterm(
      await serving(app.port, [], { config }),
      `/svc/Stream?messages=${messages}&size=${size}`,
      call,
    );
    expect(read).toMatchObject({
      status: 200,
      received: messages * (size + 5),
      endedBy: "end_stream",
      trailers: { "grpc-status": "0" },
    });
    expect(terminated).toMatchObject({ reason: "inflight_zero" });
    saidTruly(terminated, read, messages * (size + 5));
  });
});

// The client's last window: once Envoy has sent END_STREAM, the client's app still reads what its
// TCP took (up to its window) and sends nothing more; the connection must stay open until it has.
describe("an HTTP/2 client reading its last window when Envoy has sent its last byte", () => {
  it("gets every byte of 30 MB with a 1 MiB window (a third of a second to read), on the defaults", async () => {
    const { lc, port } = await serving(app.port, []);
    const download = slowH2Download(port, `/bytes?n=${BODY}`, RATE, { windowSize: 1 << 20 });
    await download.reached(RATE);
    lc.signal("SIGTERM");
    const read = await download.done;
    expect(read).toEqual({ status: 200, expected: BODY, received: BODY, endedBy: "end_stream" });
    expect(await lc.event("terminated")).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
      bytes_unsent_at_stop: 0,
    });
  });

  // Begun during the drain: Envoy sends GOAWAY and closes the connection after the stream; its
  // close waits for the client (5 MB at 500 kB/s, 1 MiB window: the last window takes 2 s).
  it("a download begun during the drain: Envoy's close waits for the client, every byte, 0 said", async () => {
    const { lc, port } = await serving(app.port, []);
    lc.signal("SIGTERM");
    await lc.event("listeners_draining");
    const body = 5_000_000;
    const read = await slowH2Download(port, `/bytes?n=${body}`, 500_000, { windowSize: 1 << 20 })
      .done;
    expect(read).toEqual({ status: 200, expected: body, received: body, endedBy: "end_stream" });
    expect(await lc.event("terminated")).toMatchObject({
      reason: "inflight_zero",
      inflight_at_stop: 0,
      bytes_unsent_at_stop: 0,
    });
  });

  // A config that sets its own delayed close (1 s, Envoy's default) keeps it: Envoy closes the
  // connection while the client still reads its last window; the stop cannot see what it lost.
  it("a delayed close the config sets shorter, timed out on a reading client, is said, not 0", async () => {
    const config = inboundConfig({ upstreamPort: app.port }) as {
      static_resources: {
        listeners: Array<
          { filter_chains: Array<{ filters: Array<{ typed_config: Record<string, unknown> }> }> }
        >;
      };
    };
    config.static_resources.listeners[0].filter_chains[0].filters[0].typed_config
      .delayed_close_timeout = "1s";
    const { lc, port } = await serving(app.port, [], { config });
    lc.signal("SIGTERM");
    await lc.event("listeners_draining");
    await slowH2Download(port, `/bytes?n=5000000`, 500_000, { windowSize: 1 << 20 }).done;
    const terminated = await lc.event("terminated");
    expect(terminated.delivery_unchecked).toEqual([
      expect.stringContaining("1 connections closed by Envoy's delayed close timeout"),
    ]);
    expect(terminated).not.toHaveProperty("bytes_unsent_at_stop");
  });

  // Envoy sends no GOAWAY on an idle connection of a draining listener: nothing tells its client
  // to close. The drain does not wait for it to the deadline; the stop says it could not see.
  it("an idle HTTP/2 connection does not hold the drain to its deadline; the stop says it is unseen", async () => {
    const { lc, port } = await serving(app.port, []);
    const idle = slowH2Download(port, "/bytes?n=10", RATE, { keepOpen: true });
    await idle.done;
    lc.signal("SIGTERM");
    const terminated = await lc.event("terminated");
    expect(terminated).toMatchObject({ reason: "inflight_zero", inflight_at_stop: 0 });
    expect(terminated.delivery_unchecked).toEqual([
      expect.stringContaining("1 HTTP/2 connections open"),
    ]);
    expect(terminated).not.toHaveProperty("bytes_unsent_at_stop");
    idle.close();
  });
});

// A hot-restart parent's admin went to its child: its codec's bytes cannot be read. Envoy ends
// the stream for the filter only once its END_STREAM left the codec, and a parent is ended only
// once its drain says so (a second reload ends it at its child's start).
describe("an HTTP/2 slow reader on a hot-restart parent", () => {
  it("SIGTERM as a hot restart is under way (16 KiB window): every byte, END_STREAM, the stop said truly", async () => {
    const { lc, port } = await serving(app.port, []);
    const download = slowH2Download(port, `/bytes?n=${BODY}`, RATE);
    await download.reached(RATE);
    lc.signal("SIGHUP"); // the reader's connection stays with the parent, which drains
    await lc.event("epoch");
    lc.signal("SIGTERM");
    const read = await download.done;
    expect(read).toEqual({ status: 200, expected: BODY, received: BODY, endedBy: "end_stream" });
    const terminated = await lc.event("terminated");
    expect(terminated).toMatchObject({ reason: "inflight_zero", inflight_at_stop: 0 });
    if ("bytes_unsent_at_stop" in terminated) expect(terminated.bytes_unsent_at_stop).toBe(0);
    else {
      expect(terminated.delivery_unchecked).toEqual([
        expect.stringContaining("its admin went to its hot-restart child"),
      ]);
    }
    expect(await lc.exited).toEqual({ code: 0, signal: null });
  });

  it("two hot restarts while the client reads its last window (1 MiB): every byte", async () => {
    const { lc, port } = await serving(app.port, []);
    const download = slowH2Download(port, `/bytes?n=${BODY}`, RATE, { windowSize: 1 << 20 });
    const { read, drained } = await acrossTwoHotRestarts(lc, download);
    expect(read).toEqual({ status: 200, expected: BODY, received: BODY, endedBy: "end_stream" });
    expect(drained).toMatchObject({ reason: "inflight_zero", inflight_at_stop: 0 });
  });
});
