// The count under real load in Envoy 1.40 (HTTP/1.1, HTTP/2, resets, WebSocket, several workers)
// equals Envoy's own.
import { afterEach, describe, expect, test } from "vitest";
import { httpBootstrap } from "../support/envoy-bootstrap.ts";
import { startEnvoy, stopAllEnvoys, type TestEnvoy, waitFor } from "../support/envoy.ts";
import { startUpstreamApp, type UpstreamApp } from "../support/upstream-app.ts";
import { closeWebSocket, h2Session, http1, http2, openWebSocket, type Outcome } from "./clients.ts";
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
const GAUGE = "wasmcustom.lastcall_inflight";
const ACTIVE = "http.ingress.downstream_rq_active";

/** The filter's gauge and Envoy's own count of active requests on the listener. */
async function counts(envoy: TestEnvoy): Promise<{ gauge?: number; active?: number }> {
  const stats = await envoy.stats(
    `^(${GAUGE.replaceAll(".", "\\.")}|${ACTIVE.replaceAll(".", "\\.")})$`,
  );
  return { gauge: stats[GAUGE], active: stats[ACTIVE] };
}

/** Resolves once `condition()` holds, checked now and at every report the sink receives. */
async function untilReports(sink: ReportSink, condition: () => boolean): Promise<void> {
  if (!condition()) await sink.next(() => condition());
}

/** Puts a probe on the sink's next answer and resolves with the filter's answer to it. */
function probe(sink: ReportSink, id: number): Promise<Report> {
  const answered = sink.next((r) => r.reason === "probe" && r.probe === id);
  sink.probe(id);
  return answered;
}

// At a quiescent instant (nothing opens or ends): the gauge settles at `expected` and equals
// Envoy's downstream_rq_active; a probe issued after that is answered with it; and once every VM
// had time for two heartbeats after the probe answer, the newest heartbeats say it too (a
// heartbeat is a hint, composed whenever its VM's timer fired: those composed before the gauge
// settled may still arrive just after the probe answer).
async function quiescent(
  envoy: TestEnvoy,
  sink: ReportSink,
  expected: number,
  vms: number,
  id: number,
  draining: boolean,
): Promise<void> {
  await waitFor(async () => {
    const now = await counts(envoy);
    return now.gauge === expected && now.active === expected ? true : undefined;
  }, { what: `${GAUGE} = ${ACTIVE} = ${expected}`, timeoutMs: 15_000 });
  expect(await probe(sink, id)).toMatchObject({ inflight: expected, draining });
  const from = sink.reports.length;
  const heartbeats = () => sink.reports.slice(from).filter((r) => r.reason === "heartbeat");
  await untilReports(sink, () => heartbeats().length >= 3 * vms);
  expect(heartbeats().slice(-vms).map((r) => r.inflight)).toEqual(Array(vms).fill(expected));
}

describe.each([2, 4])("with --concurrency %i", (concurrency) => {
  test("the gauge equals the true count at rest, probes read it, every VM acks once, a drain ends on a zero after the last response", async () => {
    const random = prng(concurrency);
    app = await startUpstreamApp();
    sink = await startReportSink();
    const token = `t0k3n-${concurrency}`;
    sink.token = token; // a report without it is answered 401 and counted failed
    const envoy = await startEnvoy(
      httpBootstrap({
        upstreamPort: app.port,
        agentPort: sink.port,
        // A 10 s report timeout: the sink answers at once, so a call that fails is the filter's
        // fault, not a machine too busy to answer within the default 1 s.
        configuration: {
          heartbeat_ms: HEARTBEAT_MS,
          push_timeout_ms: 10_000,
          instance: `c${concurrency}`,
          exclude_paths: ["/healthz"],
          token,
        },
      }),
      { concurrency },
    );
    const port = envoy.port("ingress");
    const vms = concurrency + 1; // each worker's VM and the main thread's: each has a timer
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
      const path = random() < 0.15
        ? `/stream?chunks=4&interval=${Math.floor(ms / 4) + 1}`
        : random() < 0.1
        ? "/healthz"
        : `/delay?ms=${ms}`;
      if (path === "/healthz") excluded++;
      const resetAfter = random() < 0.2 ? Math.floor(random() * 150) : undefined;
      load.push(
        random() < 0.33 ? http2(sessions[i % 2]!, path, resetAfter) : http1(port, path, resetAfter),
      );
    }
    await app.until((a) => a.held === HELD);
    const outcomes = await Promise.all(load);
    expect(outcomes.filter((o) => o.reset).length).toBeGreaterThan(20);
    expect(outcomes.filter((o) => o.status === 200).length).toBeGreaterThan(150);

    // Instant 1: only the held requests and the WebSocket are open.
    await app.until((a) => a.inflight === HELD + 1);
    await quiescent(envoy, sink, HELD + 1, vms, 1000 + concurrency, false);

    // Instant 2: five answered.
    app.release(5);
    await app.until((a) => a.inflight === HELD - 5 + 1);
    const open = HELD - 5 + 1;
    await quiescent(envoy, sink, open, vms, 2000 + concurrency, false);

    // Drain: each VM learns it from the answer to its own next report and acks it once, with the
    // gauge it reads then; no VM acks twice, however many reports it sends after.
    sink.draining = true;
    await untilReports(sink, () => sink!.count("drain_ack") === vms);
    const acks = sink.reports.filter((r) => r.reason === "drain_ack");
    expect(acks).toEqual(
      Array(vms).fill(
        expect.objectContaining({ inflight: open, draining: true, instance: `c${concurrency}` }),
      ),
    );
    await quiescent(envoy, sink, open, vms, 3000 + concurrency, true);
    expect(sink.count("drain_ack")).toBe(vms);
    expect(sink.count("zero") + sink.count("busy")).toBe(0); // nothing moved to or from zero

    // The last responses: no zero while the WebSocket is open; its close is the last move to 0.
    const zero = sink.next((r) => r.reason === "zero");
    // Snapshot of the upstream when the zero arrives: no HTTP request may still be in flight.
    const upstreamAtZero = zero.then(() => ({
      requests: app!.inflight - app!.webSockets,
      held: app!.held,
    }));
    app.release();
    const last = await Promise.all(held);
    expect(last.every((o) => o.status === 200)).toBe(true);
    const closingAt = sink.reports.length;
    expect(sink.count("zero")).toBe(0); // the WebSocket is still open
    await closeWebSocket(socket);

    const report = await zero;
    expect(await upstreamAtZero).toEqual({ requests: 0, held: 0 });
    expect(report.arrival).toBeGreaterThanOrEqual(closingAt);
    expect(report).toMatchObject({ inflight: 0, draining: true, instance: `c${concurrency}` });
    await quiescent(envoy, sink, 0, vms, 4000 + concurrency, true);
    // Two workers ending their last streams at once may both read 0: every zero says 0, none came early.
    expect(
      sink.reports.filter((r) => r.reason === "zero").every((r) =>
        r.inflight === 0 && r.arrival >= closingAt
      ),
    ).toBe(true);
    expect(sink.count("drain_ack")).toBe(vms);

    // Counted streams: every answered non-excluded request, held ones and the socket; a client reset
    // may or may not have reached Envoy, so those are bounds. Each VM adds its own at its tick.
    const answered = outcomes.filter((o) => !o.reset).length;
    const total = await waitFor(async () => {
      const value = (await envoy.stats("^wasmcustom\\.lastcall_streams_total$"))[
        "wasmcustom.lastcall_streams_total"
      ]!;
      return value >= answered - excluded + HELD + 1 ? value : undefined;
    }, { what: "lastcall_streams_total to count every answered request" });
    expect(total).toBeLessThanOrEqual(outcomes.length - excluded + HELD + 1);
    expect(
      (await envoy.stats("^wasmcustom\\.lastcall_reports_failed$"))[
        "wasmcustom.lastcall_reports_failed"
      ],
    ).toBe(0);
    expect(sink.reports.filter((r) => r.headers["x-lastcall-token"] !== token)).toEqual([]);
    expect(sink.reports.filter((r) => r.reason === "probe").map((r) => r.probe)).toEqual(
      [1, 2, 3, 4].map((k) => k * 1000 + concurrency),
    );
    for (const session of sessions) session.close();
  });
});
