// The holders of a drain in real Envoy 1.40: each worker VM names its live requests, oldest first,
// with what Envoy knows of them.
import { connect } from "node:net";
import { afterEach, expect, test } from "vitest";
import { httpBootstrap } from "../support/envoy-bootstrap.ts";
import { startEnvoy, stopAllEnvoys, waitFor } from "../support/envoy.ts";
import { startUpstreamApp, type UpstreamApp } from "../support/upstream-app.ts";
import {
  type Report,
  type ReportedHolder,
  type ReportSink,
  startReportSink,
} from "./report-sink.ts";

let app: UpstreamApp | undefined;
let sink: ReportSink | undefined;
afterEach(async () => {
  await stopAllEnvoys();
  await app?.close();
  await sink?.close();
});

/** Sends raw HTTP/1.1 request bytes on a connection of its own; resolves with the response's status line when it closes. */
function rawRequest(port: number, head: Buffer): Promise<string> {
  return new Promise((done, fail) => {
    const socket = connect(port, "127.0.0.1", () => socket.write(head));
    let response = "";
    socket.setEncoding("latin1").on("data", (chunk: string) => {
      response += chunk;
    });
    socket.once("error", fail);
    socket.once("close", () => done(response.split("\r\n")[0] ?? ""));
  });
}

/** Resolves once `condition()` holds, checked now and at every report the sink receives. */
async function untilReports(condition: () => boolean, what: string): Promise<void> {
  if (!condition()) await sink!.next(() => condition(), 20_000, what);
}

/** The latest holders report of each VM among `reports`. */
function latestHolders(reports: Report[]): Map<string, Report> {
  const latest = new Map<string, Report>();
  for (const report of reports) if (report.reason === "holders") latest.set(report.vm!, report);
  return latest;
}

interface Held {
  method: string;
  sentAtMs: number;
  reachedAtMs: number;
  done: Promise<string>;
}

test.each([
  ["by default: no method nor path", false],
  ["with holder_paths: each with its method and path, query cut", true],
])(
  "during a drain, asked for 32 holders, every VM names its live requests oldest first; one that ended is gone; outside a drain none are named (%s)",
  async (_name, holderPaths) => {
    app = await startUpstreamApp();
    sink = await startReportSink();
    // The stand-in agent asks with every answer but those to holders reports; the filter names its
    // holders only once it knows of a drain.
    sink.holdersFor = (report) => (report.reason === "holders" ? undefined : "32");
    const configuration = holderPaths ? { holder_paths: true } : "";
    const envoy = await startEnvoy(
      httpBootstrap({ upstreamPort: app.port, agentPort: sink.port, configuration }),
      { concurrency: 2 },
    );
    const port = envoy.port("ingress");
    const vms = 3; // two workers and the main thread

    // Three held requests, one after the other (each on its own connection, so on either worker).
    // Envoy 1.40 answers 400 to a path with a byte < 0x20, 0x7f or >= 0x80 before any filter sees
    // it, so the escapes of those are shown by the in-process tests (holders.test.ts) only.
    const requests: { method: string; target: Buffer; path: string }[] = [
      { method: "GET", target: Buffer.from("/hold/first?token=secret&x=1"), path: "/hold/first" },
      { method: "POST", target: Buffer.from('/hold/a"quote\\back'), path: '/hold/a"quote\\back' },
      { method: "PUT", target: Buffer.from("/hold/caf%C3%A9?q=%E9"), path: "/hold/caf%C3%A9" },
    ];
    const held: Held[] = [];
    for (const { method, target } of requests) {
      const head = Buffer.concat([
        Buffer.from(`${method} `),
        target,
        Buffer.from(" HTTP/1.1\r\nhost: app\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"),
      ]);
      const sentAtMs = Date.now();
      const done = rawRequest(port, head);
      await app.until((a) => a.held === held.length + 1);
      held.push({ method, sentAtMs, reachedAtMs: Date.now(), done });
    }
    expect(app.heldRequests().map((r) => r.method)).toEqual(["GET", "POST", "PUT"]);

    // Outside a drain: every VM heartbeats (twice, each answer asking for holders), none names any.
    // A VM's first report has no id: the answer gives it one (as the agent does).
    const heartbeats = () =>
      sink!.reports.filter((r) => r.reason === "heartbeat" && r.vm !== undefined);
    const heartbeatsPerVm = () =>
      new Map(heartbeats().map((r) => [r.vm, heartbeats().filter((h) => h.vm === r.vm).length]));
    await untilReports(
      () => heartbeatsPerVm().size === vms && [...heartbeatsPerVm().values()].every((n) => n >= 2),
      "two heartbeats of every VM",
    );
    const vmIds = [...heartbeatsPerVm().keys()] as string[];
    expect(vmIds.every((id) => /^[1-9]\d*$/.test(id))).toBe(true); // the sink's ids: distinct per VM
    expect(new Set(vmIds).size).toBe(vms);
    expect(
      sink.reports.filter((r) => r.reason === "holders" || "holders" in r || "vm_inflight" in r),
    ).toEqual([]);
    expect(sink.reports.every((r) => r.vm === undefined || vmIds.includes(r.vm))).toBe(true);

    // The drain: each VM learns it from an answer that also asks; it acks, then names its holders.
    const drainFrom = sink.reports.length;
    sink.draining = true;
    const sinceDrain = () => sink!.reports.slice(drainFrom);
    await untilReports(
      () => latestHolders(sinceDrain()).size === vms,
      "a holders report of every VM since the drain",
    );
    const first = latestHolders(sinceDrain());
    expect([...first.keys()].sort()).toEqual([...vmIds].sort());
    const named: ReportedHolder[] = [];
    for (const report of first.values()) {
      const keys = [
        "address",
        "cluster",
        "id",
        "protocol",
        "start_ns",
        ...(holderPaths ? ["method", "path"] : []),
      ].sort();
      for (const holder of report.holders!) expect(Object.keys(holder).sort()).toEqual(keys);
      expect(report).toMatchObject({ instance: "", epoch: 0, draining: true, reason: "holders" });
      const ids = report.holders!.map((h) => h.id);
      expect(ids).toEqual([...ids].sort((a, b) => a - b)); // oldest first
      expect(report.vm_inflight).toBe(report.holders!.length); // three streams: all tracked
      named.push(...report.holders!);
    }
    expect([...first.values()].reduce((sum, r) => sum + r.vm_inflight!, 0)).toBe(held.length);
    // Each request is named once: the requests went one after the other, so by request.time the
    // holders are the requests in order, and each one's time (unix ns) lies between the client's
    // send and the upstream's receipt (ms clocks, ±1 ms).
    const byStart = [...named].sort((a, b) => a.start_ns! - b.start_ns!);
    expect(byStart).toHaveLength(held.length);
    const holderOf = (h: Held) => byStart[held.indexOf(h)]!;
    for (const h of held) {
      expect(holderOf(h).start_ns! / 1e6).toBeGreaterThanOrEqual(h.sentAtMs - 1);
      expect(holderOf(h).start_ns! / 1e6).toBeLessThanOrEqual(h.reachedAtMs + 1);
      expect(holderOf(h).address).toBe(`127.0.0.1:${port}`);
      expect(holderOf(h)).toMatchObject({ protocol: "HTTP/1.1", cluster: "app" });
      const { method, path } = requests[held.indexOf(h)]!;
      if (holderPaths) expect(holderOf(h)).toMatchObject({ method, path });
    }
    const bodies = [...first.values()].map((r) => r.raw).join("\n");
    expect(bodies).not.toContain("secret"); // never the query string
    if (!holderPaths) expect(bodies).not.toContain("/hold"); // nor, by default, anything of the request line
    // Per VM, oldest first by start time too (a VM's context ids grow).
    for (const report of first.values()) {
      const starts = report.holders!.map((h) => h.start_ns!);
      expect(starts).toEqual([...starts].sort((a, b) => a - b));
    }

    // One ends: once Envoy deleted its stream, a holders report asked after that no longer names it.
    const ended = held[1]!;
    const endedId = holderOf(ended).id;
    const vmOfEnded = [...first.values()].find((r) => r.holders!.includes(holderOf(ended)))!.vm!;
    app.releaseWhere((r) => r.method === ended.method);
    expect(await ended.done).toBe("HTTP/1.1 200 OK");
    await waitFor(
      async () => ((await envoy.stats("^wasmcustom\\.lastcall_inflight$"))[
          "wasmcustom.lastcall_inflight"
        ] === 2
        ? true
        : undefined),
      { what: "the gauge to say 2" },
    );
    const from = sink.reports.length;
    const asked = await sink.next(
      (r) => r.arrival >= from && r.vm === vmOfEnded && r.reason !== "holders",
      20_000,
      `a report of VM ${vmOfEnded} (not holders)`,
    );
    const after = await sink.next(
      (r) => r.arrival > asked.arrival && r.vm === vmOfEnded && r.reason === "holders",
      20_000,
      `a holders report of VM ${vmOfEnded} after #${asked.arrival}`,
    );
    expect(after.vm_inflight).toBe(first.get(vmOfEnded)!.vm_inflight! - 1);
    expect(after.holders).toEqual(first.get(vmOfEnded)!.holders!.filter((h) => h.id !== endedId));

    app.release();
    expect(await Promise.all(held.map((h) => h.done))).toEqual(Array(3).fill("HTTP/1.1 200 OK"));
    expect(
      (await envoy.stats("^wasmcustom\\.lastcall_reports_failed$"))[
        "wasmcustom.lastcall_reports_failed"
      ],
    ).toBe(0);
  },
);
