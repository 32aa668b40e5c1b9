// One Envoy process of the in-process proxy-wasm host: the compiled module, its VMs, and the
// process-wide state they share (metrics, shared data, http calls, logs).
import { readFileSync } from "node:fs";
import {
  FILTER_WASM,
  type HostCallPoint,
  type HostOptions,
  type HttpCall,
  type LogLine,
  type SharedEntry,
  type VmOptions,
  WasmResult,
} from "./abi.ts";
import { FilterVm } from "./vm.ts";

/** One Envoy process: the shared-data store, the metrics, and every VM loaded into it. */
export class ProxyWasmHost {
  /** Everything the VMs logged. */
  readonly logs: LogLine[] = [];
  /** Every http call dispatched, in order. */
  readonly calls: HttpCall[] = [];
  /** VMs created so far. */
  readonly vms: FilterVm[] = [];
  /**
   * Runs at the start of every shared-data get or set, metric increment and http call, before
   * the host's state is touched. A test can run OTHER VMs here (a worker thread that runs between
   * two host calls of this VM, e.g. winning the race between its get and its set; running a VM
   * that is already inside a callback throws), or return a `WasmResult` code to make this call
   * fail with it and have no effect (a host error).
   */
  beforeHostCall: ((point: HostCallPoint) => number | void) | undefined;
  /** Runs after every such call took effect (or failed), with its result. */
  afterHostCall: ((point: HostCallPoint, result: number) => void) | undefined;
  /** Runs at every import the module calls (any import, before it runs), with its name. */
  onImport: ((vm: FilterVm, name: string) => void) | undefined;
  readonly #module: WebAssembly.Module;
  readonly #clusters: Set<string>;
  /** Lowest log level kept. */
  readonly logLevel: number;
  /** Wall clock, unix ns. */
  readonly clock: () => bigint;
  /** See {@linkcode HostOptions.keepRequestHeaders}. */
  readonly keepRequestHeaders: boolean;
  readonly #shared = new Map<string, Map<string, SharedEntry>>();
  #nextCas = 1;
  readonly #metrics = new Map<string, { type: number; value: bigint }>();

  /** Compiles the module once for every VM of this "process". */
  constructor(options: HostOptions = {}) {
    const bytes = typeof options.wasm === "object"
      ? options.wasm
      : readFileSync(options.wasm ?? FILTER_WASM);
    this.#module = new WebAssembly.Module(new Uint8Array(bytes));
    this.#clusters = new Set(options.clusters ?? ["lastcall_agent"]);
    this.logLevel = options.logLevel ?? 0;
    this.keepRequestHeaders = options.keepRequestHeaders ?? false;
    this.clock = options.clock ??
      (() => BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e3)) * 1000n);
  }

  /** Imports the module declares, as `module.name`. */
  imports(): string[] {
    return WebAssembly.Module.imports(this.#module).map((i) => `${i.module}.${i.name}`);
  }

  /** Instantiates a VM, creates its root context and runs vm_start and configure, like a worker. */
  createVm(options: VmOptions = {}): FilterVm {
    const vm = new FilterVm(this, this.#module, this.vms.length, options);
    this.vms.push(vm);
    vm.start();
    return vm;
  }

  /** Value of a metric by its Envoy name (`wasmcustom.lastcall_inflight`), undefined if never defined. */
  metric(name: string): number | undefined {
    const metric = this.#metrics.get(name);
    return metric === undefined ? undefined : Number(BigInt.asIntN(64, metric.value));
  }

  /** Calls not yet answered or failed. */
  pendingCalls(): HttpCall[] {
    return this.calls.filter((call) => !call.settled);
  }

  /** @internal shared-data get, as cpp-host SharedData::get. */
  getShared(vmId: string, key: string): SharedEntry | undefined {
    return this.#shared.get(vmId)?.get(key);
  }

  /** @internal shared-data set, as cpp-host SharedData::set. */
  setShared(vmId: string, key: string, value: Uint8Array, cas: number): number {
    let map = this.#shared.get(vmId);
    if (!map) this.#shared.set(vmId, map = new Map());
    const existing = map.get(key);
    if (existing && cas !== 0 && cas !== existing.cas) return WasmResult.CasMismatch;
    map.set(key, { value: value.slice(), cas: this.#takeCas() });
    return WasmResult.Ok;
  }

  #takeCas(): number {
    const cas = this.#nextCas;
    this.#nextCas = (this.#nextCas + 1) >>> 0 || 1;
    return cas;
  }

  /** @internal finds or creates the process-wide stat behind a metric name. */
  defineStat(type: number, name: string): void {
    const existing = this.#metrics.get(name);
    if (existing && existing.type !== type) {
      throw new Error(`proxy-wasm host: metric ${name} redefined with another type`);
    }
    if (!existing) this.#metrics.set(name, { type, value: 0n });
  }

  /** @internal a stat's raw value (Envoy: one atomic load). */
  statValue(name: string): bigint {
    return this.#metrics.get(name)!.value;
  }

  /** @internal adds to a stat (Envoy: atomic add/sub on one stat shared by every VM). */
  addStat(name: string, offset: bigint): void {
    const stat = this.#metrics.get(name)!;
    stat.value = BigInt.asUintN(64, stat.value + offset);
  }

  /** @internal */
  hasCluster(name: string): boolean {
    return this.#clusters.has(name);
  }
}
