// Per-request cost of the filter's ABI dispatch with 10, 1,000 and 4,000 live streams, in the
// in-process host (V8): this module against one built with the SDK's stock exports
// (@solo-io/proxy-runtime/proxy re-exported with a trivial root context). Both run side by side,
// interleaved round by round, and the ratios go to bench/results/filter-cost.json.
//
// Run: npx vitest bench --run bench/filter-cost.bench.ts
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, bench, describe } from "vitest";
import { type FilterVm, ProxyWasmHost } from "../test/support/proxy-wasm-host.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
const LIVE = [10, 1000, 4000];
const ROUNDS = 9;
const REQUESTS_PER_ROUND = 300;
const WARM_UP = 3000;

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
  const dir = resolve(root, "dist/bench");
  mkdirSync(dir, { recursive: true });
  writeFileSync(resolve(dir, "sdk-stock.ts"), STOCK_SOURCE);
  try {
    execFileSync(resolve(root, "node_modules/.bin/asc"), [
      resolve(dir, "sdk-stock.ts"), "-b", resolve(dir, "sdk-stock.wasm"),
      "--use", "abort=abort_proc_exit", "-O3", "--noAssert", "--runtime", "half",
    ], { cwd: root, stdio: "pipe" });
  } catch (error) {
    throw new Error(`Cannot build the SDK comparison module: ${(error as { stderr?: Buffer }).stderr}`);
  }
  return readFileSync(resolve(dir, "sdk-stock.wasm"));
}

// One VM with `live` streams open (headers seen), as a worker in the middle of its traffic.
function loaded(wasm: Uint8Array | undefined, live: number): FilterVm {
  const host = new ProxyWasmHost({ wasm, logLevel: 2 });
  const vm = host.createVm({ configuration: '{"heartbeat_ms":0}' });
  if (!vm.configured) throw new Error("Cannot configure the benchmark VM");
  for (let i = 0; i < live; i++) vm.requestHeaders(vm.createStream(), { ":path": "/live", ":method": "GET" });
  return vm;
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

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

const stock = buildStock();
const cells = LIVE.map((live) => {
  const ours = loaded(undefined, live);
  const sdk = loaded(stock, live);
  for (let i = 0; i < WARM_UP; i++) { request(ours); request(sdk); } // let V8 tier both up first
  const oursRuns: number[] = [];
  const sdkRuns: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    oursRuns.push(microsPerRequest(ours));
    sdkRuns.push(microsPerRequest(sdk));
  }
  const oursUs = median(oursRuns);
  const sdkUs = median(sdkRuns);
  return { live, vms: { ours, sdk }, lastcall_us_per_request: round2(oursUs), sdk_stock_us_per_request: round2(sdkUs), sdk_over_lastcall: round2(sdkUs / oursUs) };
});

function round2(value: number): number {
  return Math.round(value * 100) / 100;
}

afterAll(() => {
  const results = {
    what: "µs per request (create, request headers, response headers, log, done, delete) in the in-process proxy-wasm host",
    node: process.version,
    rounds: ROUNDS,
    requests_per_round: REQUESTS_PER_ROUND,
    date: new Date().toISOString(),
    cells: cells.map(({ vms: _, ...cell }) => cell),
  };
  mkdirSync(resolve(root, "bench/results"), { recursive: true });
  writeFileSync(resolve(root, "bench/results/filter-cost.json"), `${JSON.stringify(results, null, 2)}\n`);
});

for (const cell of cells) {
  describe(`${cell.live} live streams`, () => {
    bench("lastcall filter", () => request(cell.vms.ours), { time: 300 });
    bench("SDK stock exports", () => request(cell.vms.sdk), { time: 300 });
  });
}
