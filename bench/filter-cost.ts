// Benchmark: the filter's per-request cost and host calls in the in-process proxy-wasm host,
// against its variants and a no-op module.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type FilterVm, ProxyWasmHost } from "../test/support/proxy-wasm-host.ts";
import { progress, QUICK, ROOT, writeResult } from "./lib/context.ts";
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
    join(dir, "sdk-stock.ts"),
    "-b",
    join(dir, "sdk-stock.wasm"),
    "--use",
    "abort=abort_proc_exit",
    "-Oz",
    "--noAssert",
    "--runtime",
    "half",
  ], { cwd: ROOT, stdio: "pipe" });
  return readFileSync(join(dir, "sdk-stock.wasm"));
}

// Read here, not by the test host's default path: that one is relative to the host's own source.
const LASTCALL_WASM = readFileSync(join(ROOT, "dist/filter.wasm"));
const beforePath = join(ROOT, "dist/bench/filter-before.wasm");
const noRequestHeadersPath = join(ROOT, "dist/bench/filter-no-request-headers.wasm");
const MODULES: { id: string; wasm: Uint8Array }[] = [
  { id: "lastcall", wasm: LASTCALL_WASM },
  ...(existsSync(noRequestHeadersPath)
    ? [{ id: "no-rqh", wasm: readFileSync(noRequestHeadersPath) }]
    : []),
  ...(existsSync(beforePath) ? [{ id: "before", wasm: readFileSync(beforePath) }] : []),
  { id: "sdk_stock", wasm: buildStock() },
];

// One VM with `live` streams open (headers seen), as a worker in the middle of its traffic.
function loaded(
  wasm: Uint8Array,
  live: number,
  configuration = '{"heartbeat_ms":0}',
): { host: ProxyWasmHost; vm: FilterVm } {
  const host = new ProxyWasmHost({ wasm, logLevel: 2 });
  const vm = host.createVm({ configuration });
  if (!vm.configured) throw new Error("Cannot configure the benchmark VM");
  for (let i = 0; i < live; i++) {
    vm.requestHeaders(vm.createStream(), { ":path": "/live", ":method": "GET" });
  }
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

/** Counts every import call of the VMs instantiated inside {@linkcode metered} while `on`. */
interface Meter {
  on: boolean;
  counts: Record<string, number>;
}

/**
 * Runs `create` with every wasm import of the instances it makes wrapped in a counter: all host
 * calls by name, whether the in-process host hooks them or not (header reads, logs, properties).
 */
function metered<T>(meter: Meter, create: () => T): T {
  const Original = WebAssembly.Instance;
  const count = (name: string, fn: (...args: unknown[]) => unknown) => (...args: unknown[]) => {
    if (meter.on) meter.counts[name] = (meter.counts[name] ?? 0) + 1;
    return fn(...args);
  };
  const Metered = function (module: WebAssembly.Module, imports: WebAssembly.Imports = {}) {
    const wrapped: WebAssembly.Imports = {};
    for (const [space, entries] of Object.entries(imports)) {
      wrapped[space] = Object.fromEntries(
        Object.entries(entries).map((
          [name, value],
        ) => [
          name,
          typeof value === "function"
            ? count(name, value as (...args: unknown[]) => unknown)
            : value,
        ]),
      );
    }
    return new Original(module, wrapped);
  } as unknown as typeof WebAssembly.Instance;
  WebAssembly.Instance = Metered;
  try {
    return create();
  } finally {
    WebAssembly.Instance = Original;
  }
}

const COUNTED_REQUESTS = 100;
const EXCLUDING = '{"heartbeat_ms":0,"exclude_paths":["/healthz","/metrics*"]}';

/**
 * Host calls per request by import, outside a drain (no agent: the VM never learns of one), over
 * {@linkcode COUNTED_REQUESTS} requests with nothing else live (each moves the count 0 → 1 → 0:
 * the low-load case, the dearest for the shared-data counter of `before`); set-up not counted.
 */
function hostCalls(wasm: Uint8Array, configuration?: string): Record<string, number> {
  const meter: Meter = { on: false, counts: {} };
  const { vm } = metered(meter, () => loaded(wasm, 0, configuration));
  meter.on = true;
  for (let i = 0; i < COUNTED_REQUESTS; i++) request(vm);
  meter.on = false;
  return Object.fromEntries(
    Object.entries(meter.counts).sort().map(([name, n]) => [name, round(n / COUNTED_REQUESTS, 2)]),
  );
}

// The callbacks Envoy runs for a GET whose response has a body; it enters the VM only for those the module exports.
const PER_REQUEST_CALLBACKS = [
  "proxy_on_context_create",
  "proxy_on_request_headers",
  "proxy_on_response_headers",
  "proxy_on_response_body",
  "proxy_on_log",
  "proxy_on_done",
  "proxy_on_delete",
];
function vmEntries(wasm: Uint8Array): number {
  const exported = new Set(
    WebAssembly.Module.exports(
      new WebAssembly.Module(new Uint8Array(wasm)),
    ).map((e) => e.name),
  );
  return PER_REQUEST_CALLBACKS.filter((name) => exported.has(name)).length;
}

const median = (values: number[]) =>
  [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

const cells = LIVE.map((live) => {
  const vms = MODULES.map((m) => ({ id: m.id, vm: loaded(m.wasm, live).vm, runs: [] as number[] }));
  for (let i = 0; i < WARM_UP; i++) for (const m of vms) request(m.vm); // let V8 tier every module up first
  for (let r = 0; r < ROUNDS; r++) for (const m of vms) m.runs.push(microsPerRequest(m.vm));
  const us = Object.fromEntries(vms.map((m) => [m.id, round(median(m.runs), 2)]));
  progress("filter-cost", `${live} live: ${vms.map((m) => `${m.id} ${us[m.id]} µs`).join(", ")}`);
  return { live, us_per_request: us };
});

const calls: Record<string, Record<string, number>> = Object.fromEntries(
  MODULES.filter((m) => m.id !== "sdk_stock").map((m) => [m.id, hostCalls(m.wasm)]),
);
calls["lastcall, exclude_paths set"] = hostCalls(LASTCALL_WASM, EXCLUDING);
for (const [id, c] of Object.entries(calls)) {
  progress("filter-cost", `host calls per request, ${id}: ${JSON.stringify(c)}`);
}

writeResult("filter-cost", {
  what:
    "µs per request (create, request headers, response headers, log, done, delete) in the in-process proxy-wasm host, and host calls per request outside a drain by import",
  rounds: ROUNDS,
  requests_per_round: REQUESTS_PER_ROUND,
  modules: MODULES.map((m) => m.id),
  host_calls_counted_over:
    `${COUNTED_REQUESTS} requests outside a drain, nothing else live (0 → 1 → 0 each); every wasm import call`,
  exclude_paths_configuration: EXCLUDING,
  host_calls_per_request: calls,
  vm_entries_per_request: Object.fromEntries(MODULES.map((m) => [m.id, vmEntries(m.wasm)])),
  cells,
});
