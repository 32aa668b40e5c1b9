// The count under real load in Envoy 1.40: HTTP/1.1, HTTP/2, client resets, a WebSocket, several
// workers. At quiescent instants the gauge and the newest report equal what is really open.
import { afterEach, describe, expect, test } from "vitest";
import { type TestEnvoy, httpBootstrap, startEnvoy, stopAllEnvoys, waitFor } from "../support/envoy.ts";
import { type UpstreamApp, startUpstreamApp } from "../support/upstream-app.ts";
import { type Outcome, closeWebSocket, h2Session, http1, http2, openWebSocket } from "./clients.ts";
import { prng } from "./prng.ts";
import { type Report, type ReportSink, startReportSink } from "./report-sink.ts";

let app: UpstreamApp | undefined;
let sink: ReportSink | undefined;
afterEach(async () => {
  await stopAllEnvoys();
  await app?.close();
  await sink?.close();
});

const HEARTBEAT_MS = 100;

async function gauge(envoy: TestEnvoy): Promise<number | undefined> {
  return (await envoy.stats("^wasmcustom\\.lastcall_inflight$"))["wasmcustom.lastcall_inflight"];
}

// Waits until the gauge settles at `expected`, then until every worker VM has reported since;
// returns the newest report (highest seq), which must describe the settled state.
async function settle(envoy: TestEnvoy, sink: ReportSink, expected: number, vms: number): Promise<Report> {
  await waitFor(async () => ((await gauge(envoy)) === expected ? true : undefined),
    { what: `lastcall_inflight = ${expected}`, timeoutMs: 15_000 });
  const from = sink.reports.length;
  await waitFor(() => (sink.reports.length - from >= vms + 1 ? true : undefined),
    { what: "a heartbeat from every VM", timeoutMs: 10_000 });
  return sink.reports.reduce((a, b) => (b.seq > a.seq ? b : a));
}

describe.each([2, 4])("with --concurrency %i", (concurrency) => {
  test("the gauge and the reports equal the true in-flight count, and a drain ends on a zero after the last response", async () => {
    const random = prng(concurrency);
    app = await startUpstreamApp();
    sink = await startReportSink();
    const token = `t0k3n-${concurrency}`;
    sink.token = token; // a report without it is answered 401 and counted failed
    const envoy = await startEnvoy(httpBootstrap({
      upstreamPort: app.port, agentPort: sink.port,
      // A 10 s report timeout: the sink answers at once, so a call that fails is the filter's
      // fault, not a machine too busy to answer within the default 1 s (seen once in 30 runs
      // while a build ran beside the suite: 24 heartbeats timed out).
      configuration: { heartbeat_ms: HEARTBEAT_MS, push_timeout_ms: 10_000, instance: `c${concurrency}`, exclude_paths: ["/healthz"], token },
    }), { concurrency });
    const port = envoy.port("ingress");
    const vms = concurrency + 1;
    const sessions = await Promise.all([h2Session(port), h2Session(port)]);

    // Load: 240 requests with random durations, a fifth reset by the client, a third over HTTP/2,
    // plus HELD requests that stay open and one WebSocket.
    const HELD = 12;
    const held: Promise<Outcome>[] = [];
    for (let i = 0; i < HELD; i++) {
      held.push(i % 3 === 0 ? http2(sessions[i % 2]!, "/hold") : http1(port, "/hold"));
    }
    const socket = await openWebSocket(port);
    const load: Promise<Outcome>[] = [];
    let excluded = 0;
    for (let i = 0; i < 240; i++) {
      const ms = Math.floor(random() * 300);
      const path = random() < 0.15 ? `/stream?chunks=4&interval=${Math.floor(ms / 4) + 1}` : random() < 0.1 ? "/healthz" : `/delay?ms=${ms}`;
      if (path === "/healthz") excluded++;
      const resetAfter = random() < 0.2 ? Math.floor(random() * 150) : undefined;
      load.push(random() < 0.33 ? http2(sessions[i % 2]!, path, resetAfter) : http1(port, path, resetAfter));
    }
    await app.until((a) => a.held === HELD);
    const outcomes = await Promise.all(load);
    expect(outcomes.filter((o) => o.reset).length).toBeGreaterThan(20);
    expect(outcomes.filter((o) => o.status === 200).length).toBeGreaterThan(150);

    // Instant 1: only the held requests and the WebSocket are open.
    await app.until((a) => a.inflight === HELD + 1);
    expect((await settle(envoy, sink, HELD + 1, vms)).inflight).toBe(HELD + 1);

    // Instant 2: five answered.
    app.release(5);
    await app.until((a) => a.inflight === HELD - 5 + 1);
    expect((await settle(envoy, sink, HELD - 5 + 1, vms)).inflight).toBe(HELD - 5 + 1);

    // Probe: the agent pulls the count by answering a report with x-lastcall-probe.
    const probed = sink.next((r) => r.reason === "probe");
    sink.probe(1000 + concurrency);
    expect(await probed).toMatchObject({ probe: 1000 + concurrency, inflight: HELD - 5 + 1, draining: false });

    // Drain: the agent says draining; exactly one VM acks with the true count. The first answer
    // that says draining also probes: the VM it reaches reports the count it reads after the flag.
    sink.draining = true;
    sink.probe(2000 + concurrency);
    const drainProbe = sink.next((r) => r.reason === "probe" && r.probe === 2000 + concurrency);
    const ack = await sink.next((r) => r.reason === "drain_ack");
    expect(ack).toMatchObject({ inflight: HELD - 5 + 1, draining: true, instance: `c${concurrency}` });
    expect(await drainProbe).toMatchObject({ inflight: HELD - 5 + 1, draining: true, instance: `c${concurrency}` });
    const zero = sink.next((r) => r.reason === "zero" && r.draining);
    // Snapshot of the upstream when the zero arrives: no HTTP request may still be in flight.
    const upstreamAtZero = zero.then(() => ({ requests: app!.inflight - app!.webSockets, held: app!.held }));

    app.release();
    const last = await Promise.all(held);
    expect(last.every((o) => o.status === 200)).toBe(true);
    expect(sink.reports.some((r) => r.reason === "zero")).toBe(false); // the WebSocket is still open
    const closingAt = sink.reports.length;
    await closeWebSocket(socket);

    const report = await zero;
    expect(await upstreamAtZero).toEqual({ requests: 0, held: 0 });
    expect(report.arrival).toBeGreaterThanOrEqual(closingAt);
    expect(report.inflight).toBe(0);
    expect(report.seq).toBeGreaterThan(ack.seq);
    expect(sink.reports.filter((r) => r.reason === "drain_ack")).toHaveLength(1);
    expect(sink.reports.filter((r) => r.reason === "zero")).toHaveLength(1);
    expect(await gauge(envoy)).toBe(0);
    const stats = await envoy.stats("^wasmcustom\\.lastcall_");
    // Counted streams: every answered non-excluded request, held ones and the socket; a client reset
    // may or may not have reached Envoy, so those are bounds.
    const answered = outcomes.filter((o) => !o.reset).length;
    expect(stats["wasmcustom.lastcall_streams_total"]).toBeGreaterThanOrEqual(answered - excluded + HELD + 1);
    expect(stats["wasmcustom.lastcall_streams_total"]).toBeLessThanOrEqual(outcomes.length - excluded + HELD + 1);
    expect(stats["wasmcustom.lastcall_reports_failed"]).toBe(0);
    expect(sink.reports.filter((r) => r.headers["x-lastcall-token"] !== token)).toEqual([]);
    expect(sink.reports.filter((r) => r.reason === "probe").map((r) => r.probe)).toEqual([1000 + concurrency, 2000 + concurrency]);
    for (const session of sessions) session.close();
  });
});
