// The in-process host's view of the holders protocol, shared by holders.test.ts and
// holder-paths.test.ts: a VM told of the drain, asked for its holders, and the report it sends.
import { expect } from "vitest";
import type { FilterVm, HttpCall, ProxyWasmHost } from "../support/proxy-wasm-host.ts";
import type { SentReport } from "./report-sink.ts";

export const SLOTS = 16384;
export const EXCLUDING = '{"exclude_paths":["/healthz"]}';

export const parse = (call: HttpCall) => JSON.parse(call.body) as SentReport;

/** Ticks `vm` and answers its heartbeat with `headers` (200); returns the reports the answer caused. */
export function answerTick(
  host: ProxyWasmHost,
  vm: FilterVm,
  headers: [string, string][],
): HttpCall[] {
  const from = host.calls.length;
  vm.tick();
  host.calls[from]!.respond(200, "", headers);
  return host.calls.slice(from + 1);
}

/** Tells `vm` of the drain (it acks), and gives it the id 42 as the agent would, if it has none. */
export function drain(host: ProxyWasmHost, vm: FilterVm): void {
  answerTick(host, vm, [["x-lastcall-draining", "1"], ["x-lastcall-vm", "42"]]);
}

/** Asks a VM that knows of the drain for `n` holders; the holders report, or undefined if none was sent. */
export function ask(
  host: ProxyWasmHost,
  vm: FilterVm,
  n = "32",
): { call: HttpCall; report: SentReport } | undefined {
  const calls = answerTick(host, vm, [["x-lastcall-draining", "1"], ["x-lastcall-holders", n]])
    .filter((c) => parse(c).reason === "holders");
  expect(calls.length).toBeLessThanOrEqual(1);
  return calls[0] && { call: calls[0], report: parse(calls[0]) };
}

export const ids = (report: SentReport | undefined) => report?.holders?.map((h) => h.id);
