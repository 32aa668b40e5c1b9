// The agent's side of docs/filter-protocol.md for tests: records every report and answers as the
// test decides.
import { EventEmitter } from "node:events";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";

/** One live stream a VM named in a holders report. */
export interface ReportedHolder {
  id: number;
  start_ns?: number;
  method?: string;
  path?: string;
  address?: string;
  protocol?: string;
  cluster?: string;
  route?: string;
}

/** One report's body as the filter sends it (docs/filter-protocol.md: no sequence number). */
export interface SentReport {
  instance: string;
  epoch: number;
  inflight: number;
  draining: boolean;
  /** Present (true) while the VM knows of a drain whose floor holds: it pushes nothing yet. */
  quiet?: true;
  reason: "heartbeat" | "drain_ack" | "zero" | "busy" | "probe" | "holders";
  /** The probe id answered (probe reports only). */
  probe?: number;
  /** The VM's id, once an answer gave it one. */
  vm?: string;
  /** The VM's own count of its live streams (holders reports only). */
  vm_inflight?: number;
  /** The VM's oldest live streams (holders reports only). */
  holders?: ReportedHolder[];
}

/** One report as the sink received it. */
export interface Report extends SentReport {
  /** The body as sent. */
  raw: string;
  /** Arrival order at the sink. */
  arrival: number;
  /** Request headers, lower-case. */
  headers: Record<string, string | string[] | undefined>;
}

/** A recording agent endpoint. */
export interface ReportSink {
  /** Port on 127.0.0.1. */
  readonly port: number;
  /** Every report, in arrival order. */
  readonly reports: Report[];
  /** What to answer from now on. */
  draining: boolean;
  /** Status to answer with. @default 200 */
  status: number;
  /** When set, a report without `x-lastcall-token: <token>` is answered 401 (and still recorded). */
  token: string | undefined;
  /** Puts `x-lastcall-probe: <id>` on the next answer (one answer only). */
  probe(id: number): void;
  /** When set, the value of `x-lastcall-holders` to answer `report` with (undefined: none). */
  holdersFor: ((report: Report) => string | undefined) | undefined;
  /** Reports whose reason is `reason`. */
  count(reason: Report["reason"]): number;
  /** Resolves with the first report (from now on) matching `predicate`. */
  next(predicate: (report: Report) => boolean, timeoutMs?: number, what?: string): Promise<Report>;
  /** Closes the server. */
  close(): Promise<void>;
}

/** Starts the sink on a free port. */
export async function startReportSink(): Promise<ReportSink> {
  const events = new EventEmitter();
  events.setMaxListeners(0);
  const reports: Report[] = [];
  const probes: number[] = [];
  let vmIds = 0;
  const server = createServer((request, response) => {
    let body = "";
    request.setEncoding("utf8").on("data", (chunk: string) => {
      body += chunk;
    }).on("end", () => {
      if (request.method !== "POST" || request.url !== "/v1/inflight") {
        response.writeHead(404).end();
        return;
      }
      const report = {
        ...JSON.parse(body),
        raw: body,
        arrival: reports.length,
        headers: request.headers,
      } as Report;
      reports.push(report);
      if (sink.token !== undefined && request.headers["x-lastcall-token"] !== sink.token) {
        response.writeHead(401).end();
        events.emit("report", report);
        return;
      }
      const headers: Record<string, string> = {
        "content-type": "application/json",
        "x-lastcall-draining": sink.draining ? "1" : "0",
      };
      const probe = probes.shift();
      if (probe !== undefined) headers["x-lastcall-probe"] = String(probe);
      // As the agent does: a VM that reports without an id gets the next one.
      if (report.vm === undefined) headers["x-lastcall-vm"] = String(++vmIds);
      const holders = sink.holdersFor?.(report);
      if (holders !== undefined) headers["x-lastcall-holders"] = holders;
      response.writeHead(sink.status, headers);
      response.end(JSON.stringify({ draining: sink.draining }));
      events.emit("report", report);
    });
  });
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  const sink: ReportSink = {
    port: (server.address() as AddressInfo).port,
    reports,
    draining: false,
    status: 200,
    token: undefined,
    holdersFor: undefined,
    probe(id) {
      probes.push(id);
    },
    count(reason) {
      return reports.filter((report) => report.reason === reason).length;
    },
    next(predicate, timeoutMs = 15_000, what = "a matching report") {
      return new Promise((done, fail) => {
        const onReport = (report: Report) => {
          if (!predicate(report)) return;
          clearTimeout(timer);
          events.off("report", onReport);
          done(report);
        };
        const timer = setTimeout(() => {
          events.off("report", onReport);
          const last = reports.slice(-12).map((r) =>
            `${r.arrival} ${r.vm ?? "-"} ${r.reason}${
              r.holders ? ` ${r.holders.length} holders` : ""
            }`
          ).join("; ");
          fail(
            new Error(
              `No report: ${what}, within ${timeoutMs} ms (${reports.length} received; the last: ${last})`,
            ),
          );
        }, timeoutMs);
        events.on("report", onReport);
      });
    },
    close() {
      server.closeAllConnections();
      return new Promise((done) => server.close(() => done()));
    },
  };
  return sink;
}
