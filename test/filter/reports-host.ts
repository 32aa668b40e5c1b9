// The in-process host's side of the report protocol, shared by reports.test.ts and
// draining.test.ts: the filter's stats, a report's body, and the agent's answer to it.
import { expect } from "vitest";
import type { FilterVm, HttpCall, ProxyWasmHost } from "../support/proxy-wasm-host.ts";
import type { SentReport } from "./report-sink.ts";
import { gaugeName } from "./truth.ts";

export const GAUGE = gaugeName(0);
export const TOTAL = "wasmcustom.lastcall_streams_total";
export const SENT = "wasmcustom.lastcall_reports_sent";
export const FAILED = "wasmcustom.lastcall_reports_failed";
export const HEADERS: [string, string][] = [[":method", "POST"], [":path", "/v1/inflight"], [
  ":authority",
  "lastcall",
], ["content-type", "application/json"]];

export type Report = Omit<SentReport, "vm">;
/** A report's body without its `vm` (checked here: absent, or the decimal id the agent gave; holders.test.ts). */
export const body = (call: HttpCall) => {
  const { vm, ...report } = JSON.parse(call.body) as SentReport;
  if (vm !== undefined) expect(vm).toMatch(/^[1-9]\d*$/);
  return report as Report;
};
export const reasons = (calls: HttpCall[]) => calls.map((call) => body(call).reason);

/** The agent's answer to a report: 200, `x-lastcall-draining` and maybe `x-lastcall-probe`; a body for humans. */
export function answer(call: HttpCall, draining: boolean, probe?: string): void {
  const headers: [string, string][] = [["x-lastcall-draining", draining ? "1" : "0"]];
  if (probe !== undefined) headers.push(["x-lastcall-probe", probe]);
  call.respond(200, JSON.stringify({ draining }), headers);
}

/** Ticks `vm` and answers its heartbeat: after this the VM knows of the drain (or not). */
export function heartbeat(
  host: ProxyWasmHost,
  vm: FilterVm,
  draining: boolean,
  probe?: string,
): HttpCall[] {
  const from = host.calls.length;
  vm.tick();
  answer(host.calls[from]!, draining, probe);
  return host.calls.slice(from);
}
