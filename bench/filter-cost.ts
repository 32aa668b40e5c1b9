// The filter's per-request cost in the in-process proxy-wasm host (V8, test/support): one whole
// request (create, request headers, response headers, log, done, delete) through this filter,
// the filter before the cost cut, and a module built from the AssemblyScript SDK's stock exports,
// with 0, 10, 1,000 and 4,000 streams kept live; interleaved rounds, medians. Also the host calls
// each module makes per request on process-wide state (what costs in Envoy: each is a wasm → host
// transition, and each shared-data get also makes the host call back into the module's `malloc`).
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type FilterVm, ProxyWasmHost } from "../test/support/proxy-wasm-host.ts";
import { QUICK, ROOT, progress, writeResult } from "./lib/context.ts";
import { round } from "./lib/stats.ts";

const LIVE = [0, 10, 1000, 4000]; // 0: every request moves the count to and from zero (low load)
const ROUNDS = QUICK ? 3 : 9;
const REQUESTS_PER_ROUND = 300;
const WARM_UP = QUICK ? 1000 : 3000;

// The comparison module: built under dist/ so that asc resolves the SDK from node_modules.
const STOCK_SOURCE = `
export * from "@solo-io/proxy-runtime/proxy";
import { RootContext, Context, registerRootContext } from "@solo-io/proxy-runtime";
class StockRoot extends RootContext {
  createContext(context_id: u32): Context { return new Context(context_id, this); }
  onConfigure(configuration_size: u32): bool { return true; }
}
registerRootContext((context_id: u32) => new StockRoot(context_id), "lastcall_inflight");
`;

function buildStock(): Uint8Array {
  const dir = join(ROOT, "dist/bench");
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "sdk-stock.ts"), STOCK_SOURCE);
  execFileSync(join(ROOT, "node_modules/.bin/asc"), [
    join(dir, "sdk-stock.ts"), "-b", join(dir, "sdk-stock.wasm"), "--use", "abort=abort_proc_exit", "-O3", "--noAssert", "--runtime", "half",
  ], { cwd: ROOT, stdio: "pipe" });
  return readFileSync(join(dir, "sdk-stock.wasm"));
}

const beforePath = join(ROOT, "dist/bench/filter-before.wasm");
const MODULES: { id: string; wasm: Uint8Array | undefined }[] = [
  { id: "lastcall", wasm: undefined },
  ...(existsSync(beforePath) ? [{ id: "before", wasm: readFileSync(beforePath) }] : []),
  { id: "sdk_stock", wasm: buildStock() },
];

// One VM with `live` streams open (headers seen), as a worker in the middle of its traffic.
function loaded(wasm: Uint8Array | undefined, live: number): { host: ProxyWasmHost; vm: FilterVm } {
  const host = new ProxyWasmHost({ wasm, logLevel: 2 });
  const vm = host.createVm({ configuration: '{"heartbeat_ms":0}' });
  if (!vm.configured) throw new Error("Cannot configure the benchmark VM");
  for (let i = 0; i < live; i++) vm.requestHeaders(vm.createStream(), { ":path": "/live", ":method": "GET" });
  return { host, vm };
}

// One whole request as Envoy drives it: create, headers both ways, log, done, delete.
function request(vm: FilterVm): void {
  const id = vm.createStream();
  vm.requestHeaders(id, { ":path": "/api", ":method": "GET", ":authority": "app" });
  vm.responseHeaders(id);
  vm.endStream(id);
}

function microsPerRequest(vm: FilterVm): number {
  const start = process.hrtime.bigint();
  for (let i = 0; i < REQUESTS_PER_ROUND; i++) request(vm);
  return Number(process.hrtime.bigint() - start) / 1000 / REQUESTS_PER_ROUND;
}

/** Host calls (by import) of one request when nothing else is live: the lowest-load case, where every request moves the count to and from zero. */
function hostCalls(wasm: Uint8Array | undefined): Record<string, number> {
  const { host, vm } = loaded(wasm, 0);
  const counts: Record<string, number> = {};
  host.afterHostCall = ({ call }) => { counts[call] = (counts[call] ?? 0) + 1; };
  request(vm);
  return counts;
}

// The callbacks Envoy runs for a GET whose response has a body; it enters the VM only for those the module exports.
const PER_REQUEST_CALLBACKS = ["proxy_on_context_create", "proxy_on_request_headers", "proxy_on_response_headers", "proxy_on_response_body", "proxy_on_log", "proxy_on_done", "proxy_on_delete"];
function vmEntries(wasm: Uint8Array | undefined): number {
  const exported = new Set(WebAssembly.Module.exports(new WebAssembly.Module(new Uint8Array(wasm ?? readFileSync(join(ROOT, "dist/filter.wasm"))))).map((e) => e.name));
  return PER_REQUEST_CALLBACKS.filter((name) => exported.has(name)).length;
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

const cells = LIVE.map((live) => {
  const vms = MODULES.map((m) => ({ id: m.id, vm: loaded(m.wasm, live).vm, runs: [] as number[] }));
  for (let i = 0; i < WARM_UP; i++) for (const m of vms) request(m.vm); // let V8 tier every module up first
  for (let r = 0; r < ROUNDS; r++) for (const m of vms) m.runs.push(microsPerRequest(m.vm));
  const us = Object.fromEntries(vms.map((m) => [m.id, round(median(m.runs), 2)]));
  progress("filter-cost", `${live} live: ${vms.map((m) => `${m.id} ${us[m.id]} µs`).join(", ")}`);
  return { live, us_per_request: us };
});

writeResult("filter-cost", {
  what: "µs per request (create, request headers, response headers, log, done, delete) in the in-process proxy-wasm host, and host calls per request",
  rounds: ROUNDS,
  requests_per_round: REQUESTS_PER_ROUND,
  modules: MODULES.map((m) => m.id),
  host_calls_per_request: Object.fromEntries(MODULES.filter((m) => m.id !== "sdk_stock").map((m) => [m.id, hostCalls(m.wasm)])),
  vm_entries_per_request: Object.fromEntries(MODULES.map((m) => [m.id, vmEntries(m.wasm)])),
  cells,
});
