// `POST /v1/inflight`, the filter's reports. A drain brings one per move of the count to or from
// zero, so on node:http they are answered straight from Node's request, not through Hono's
// adapter (a web Request and Response per call, on code still cold when a drain begins:
// docs/architecture.md); the Hono route, for `app.request()` callers, gives the same answer.
import type { IncomingMessage, ServerResponse } from "node:http";
import { type InflightReport, parseReport } from "../drain/in-flight.ts";
import { readCapped } from "./body-cap.ts";
import { REPORT_TOKEN_HEADER, reportTokenCheck } from "./report-token.ts";
import type { ReportAnswer } from "./reports.ts";

/** Decodes report bodies (one decoder for every report). */
const utf8 = new TextDecoder();

/** The route of the filter's reports. */
export const REPORT_PATH = "/v1/inflight";

/**
 * The largest report body accepted: a report is about 170 bytes, one naming a VM's 32 oldest
 * streams (paths cut at 256 bytes, escaped) up to about 14 KiB.
 */
export const REPORT_MAX_BYTES = 16_384;

/** Response header of `POST /v1/inflight`: `1` when the agent is draining, else `0`. */
export const DRAINING_HEADER = "x-lastcall-draining";

/** Response header of `POST /v1/inflight` while a drain's floor holds: `1`, push nothing yet. */
export const QUIET_HEADER = "x-lastcall-quiet";

/** Response header of `POST /v1/inflight`: the probe being answered, when there is one. */
export const PROBE_HEADER = "x-lastcall-probe";

/** Response header of `POST /v1/inflight` during a drain: name your oldest N live streams. */
export const HOLDERS_HEADER = "x-lastcall-holders";

/** Response header of `POST /v1/inflight` to a report without `vm`: the VM's id from now on. */
export const VM_HEADER = "x-lastcall-vm";

/** What the route needs from the agent. */
export interface ReportControls {
  /**
   * The secret the filter sends in `x-lastcall-token` with each report (at least 16
   * characters; see `createReportToken`). Never put in a response, a log line or a metric.
   */
  reportToken: string;
  /** A report was refused (no or wrong token): counted, as a sign of a neighbour on the port. */
  reportRefused?(): void;
  /** Takes a filter report; answers whether the agent is draining and which probe is answered. */
  report(report: InflightReport): Promise<ReportAnswer>;
}

/** An answer to a report: its status, headers and JSON body. */
export interface ReportReply {
  status: 200 | 400 | 403 | 413;
  headers: Record<string, string>;
  body: Record<string, unknown>;
}

/** One report as it arrived: its token header and a reader of its body (undefined: too large). */
export type ReportCall = (
  token: string | undefined,
  body: (maxBytes: number) => Promise<Uint8Array | undefined>,
) => Promise<ReportReply>;

/**
 * The answer to each report: 403 before its body is read when the token is missing or wrong,
 * 413 once the body passes {@linkcode REPORT_MAX_BYTES}, 400 when it is not a report.
 *
 * @throws {RangeError} when `controls.reportToken` is too short (naming its length only)
 * @example
 * ```ts
 * const reply = await reportCall(controls)(token, () => Promise.resolve(bytes));
 * ```
 */
export function reportCall(controls: ReportControls): ReportCall {
  const tokenMatches = reportTokenCheck(controls.reportToken);
  return async function report(token, readBody) {
    if (!tokenMatches(token)) {
      controls.reportRefused?.();
      return reply(403, { error: "report token missing or wrong" });
    }
    const bytes = await readBody(REPORT_MAX_BYTES);
    if (bytes === undefined) {
      return reply(413, { error: `report body larger than ${REPORT_MAX_BYTES} bytes` });
    }
    let report: InflightReport;
    try {
      report = parseReport(JSON.parse(utf8.decode(bytes)));
    } catch (error) {
      return reply(400, { error: (error as Error).message });
    }
    const { draining, quiet, probe, holders, vm } = await controls.report(report);
    const headers: Record<string, string> = { [DRAINING_HEADER]: draining ? "1" : "0" };
    if (quiet) headers[QUIET_HEADER] = "1";
    if (probe !== undefined) headers[PROBE_HEADER] = String(probe);
    if (holders !== undefined) headers[HOLDERS_HEADER] = String(holders);
    if (vm !== undefined) headers[VM_HEADER] = vm;
    return reply(200, probe === undefined ? { draining } : { draining, probe }, headers);
  };
}

/**
 * Answers `POST /v1/inflight` on node:http; false for any other request (left to the app).
 *
 * @example
 * ```ts
 * const front = reportFront(reportCall(controls));
 * createServer((incoming, outgoing) => front(incoming, outgoing) || app(incoming, outgoing));
 * ```
 */
export function reportFront(
  call: ReportCall,
): (incoming: IncomingMessage, outgoing: ServerResponse) => boolean {
  return function reportFront(incoming, outgoing) {
    if (incoming.method !== "POST" || incoming.url?.split("?")[0] !== REPORT_PATH) return false;
    const token = incoming.headers[REPORT_TOKEN_HEADER];
    call(typeof token === "string" ? token : undefined, (max) => readCapped(incoming, max))
      .then(
        ({ status, headers, body }) => answerJson(outgoing, status, body, headers),
        (error: Error) => answerJson(outgoing, 500, { error: error.message }),
      );
    // A body left unread (refused, or over the cap) is discarded once answered, for a while:
    // closed at once, the caller could be reset before it reads the answer.
    outgoing.once("finish", () => {
      if (!incoming.readableEnded) discard(incoming);
    });
    return true;
  };
}

function answerJson(
  outgoing: ServerResponse,
  status: number,
  body: Record<string, unknown>,
  headers: Record<string, string> = {},
): void {
  const text = JSON.stringify(body);
  outgoing.writeHead(status, {
    ...headers,
    "content-type": "application/json",
    "content-length": Buffer.byteLength(text),
  });
  outgoing.end(text);
}

/** How long, and how much of, an unread body is discarded before its connection is cut. */
const DISCARD_MS = 500;
const DISCARD_MAX_BYTES = 64 * 1024 * 1024;

function discard(incoming: IncomingMessage): void {
  let bytes = 0;
  const cut = () => {
    clearTimeout(timer);
    incoming.socket?.destroySoon();
  };
  const timer = setTimeout(cut, DISCARD_MS);
  incoming.on("data", (chunk: Uint8Array) => {
    if ((bytes += chunk.byteLength) > DISCARD_MAX_BYTES) cut();
  }).once("end", () => clearTimeout(timer)).resume();
}

function reply(
  status: ReportReply["status"],
  body: Record<string, unknown>,
  headers: Record<string, string> = {},
): ReportReply {
  return { status, headers, body };
}
