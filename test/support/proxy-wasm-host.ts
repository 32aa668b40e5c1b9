// An in-process proxy-wasm host (ABI 0.2.x) for unit tests, modelled on Envoy 1.40 and
// proxy-wasm-cpp-host (src/exports.cc, shared_data.cc; Envoy source/extensions/common/wasm/context.cc):
// - several VMs (one per "worker") of one Envoy process share ONE set of named metrics: a
//   gauge moved by any VM (proxy_increment_metric) is the process-wide value every VM reads
//   (proxy_get_metric), as Envoy's stats are process-wide atomics;
// - metrics: per-VM ids (type in the low 2 bits), one stat per name; counters take only offset > 0;
// - shared data (get → value + cas, stale cas → CasMismatch): the filter no longer imports it;
//   kept for bench/filter-cost.ts, which runs the filter from before the gauge contract beside it;
// - ticks per root context, driven by the test; http calls recorded for the test to answer or fail;
// - callbacks in Envoy's order: create → [headers/body…] → log → done → delete;
// - races: worker threads run in parallel and hold no lock between two host calls, so any other
//   worker may run between two host calls of one VM. `beforeHostCall` lets a test run other VMs
//   at that point (nested: they run to completion before this VM's call goes on), or fail the
//   call with a host error; `afterHostCall` observes every state the process passes through;
//   `onImport` sees every import the module calls, whatever it touches;
// - the effective context (proxy_set_effective_context, cpp-host exports.cc): BadArgument for an
//   id the VM does not know, else every later host call of the callback acts for that context
//   (its properties and request headers; an http call still belongs to the VM's root context, as
//   cpp-host's http_call takes `root_context()`), until the callback returns;
// - properties of a stream: `request.time` (8-byte little-endian int64, unix ns),
//   `destination.address`, `request.protocol`, `xds.cluster_name` and `xds.route_name` (empty: an
//   unnamed route); `request.method` and `request.url_path` from its request headers only
//   while its own request-headers callback runs (Envoy 1.40 forgets a wasm context's request
//   headers when that callback returns Continue; `keepRequestHeaders` models a host that keeps
//   them); NotFound where the context has no such value;
// - request header values are bytes, one per character of the test's string (latin1), so a test
//   can send any byte, as a client can to Envoy;
// - the clock (proxy_get_current_time_nanoseconds): the host's `clock`, unix ns.
// Any import the module declares that is not modelled here throws when called.
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

/** proxy-wasm `WasmResult` codes. */
export const WasmResult = {
  Ok: 0, NotFound: 1, BadArgument: 2, InvalidMemoryAccess: 6, CasMismatch: 8, InternalFailure: 10,
} as const;

/** Default module: the filter built by `npm run build:filter`. */
export const FILTER_WASM = fileURLToPath(new URL("../../dist/filter.wasm", import.meta.url));

const METRIC_COUNTER = 0;
const METRIC_GAUGE = 1;
const METRIC_HISTOGRAM = 2;
const HEADERS_REQUEST = 0;
const HEADERS_HTTP_CALL_RESPONSE = 6;
const BUFFER_HTTP_CALL_RESPONSE_BODY = 4;
const BUFFER_VM_CONFIGURATION = 6;
const BUFFER_PLUGIN_CONFIGURATION = 7;

/** One line the module logged. */
export interface LogLine {
  /** 0 trace … 5 critical. */
  level: number;
  /** The message. */
  message: string;
  /** The VM that logged it. */
  vm: number;
}

/** One `proxy_http_call` the module dispatched; answer it with `respond` or `fail`. */
export interface HttpCall {
  /** The calling VM. */
  readonly vm: FilterVm;
  /** The token the host returned. */
  readonly token: number;
  /** The effective context when the call was dispatched (the answer goes to the root context whatever it is). */
  readonly effectiveContext: number;
  /** Cluster name (the call's "uri"). */
  readonly cluster: string;
  /** Request headers in order. */
  readonly headers: [string, string][];
  /** Request body. */
  readonly body: string;
  /** Timeout the module asked for. */
  readonly timeoutMs: number;
  /** Whether it was answered or failed. */
  settled: boolean;
  /** Delivers a response to the calling root context. */
  respond(status: number, body?: string, headers?: [string, string][]): void;
  /** Delivers a failure (reset, timeout): the callback runs with no headers and no body. */
  fail(): void;
}

/** Options of {@linkcode ProxyWasmHost}. */
export interface HostOptions {
  /** Module bytes or path. @default FILTER_WASM */
  wasm?: string | Uint8Array;
  /** Clusters that exist; a call to any other returns BadArgument, as in Envoy. @default ["lastcall_agent"] */
  clusters?: string[];
  /** Lowest log level kept in `logs` (Envoy prints info = 2 and up by default). @default 0 */
  logLevel?: number;
  /** Wall clock, unix ns (`proxy_get_current_time_nanoseconds`, a stream's `request.time`). @default the real clock */
  clock?: () => bigint;
  /**
   * Whether `request.method` / `request.url_path` stay readable after the stream's request-headers
   * callback (Envoy 1.40: no). `request.url_path` is the `:path` up to `?`, one byte per
   * character (latin1), so a test can send any byte. @default false
   */
  keepRequestHeaders?: boolean;
}

/** Options of {@linkcode FilterVm.createStream}. */
export interface StreamOptions {
  /** Context id; must be free in the VM. @default the VM's next id (ids only grow, as in cpp-host) */
  id?: number;
  /** `request.time`, unix ns. @default the host's clock at creation */
  startNs?: bigint;
  /** `destination.address`: the local address the client reached. @default "127.0.0.1:10000" */
  address?: string;
  /** Whether the context has request properties (`request.time`; false: a TCP connection). @default true */
  http?: boolean;
  /** `request.protocol` (an HTTP stream only). @default "HTTP/1.1" */
  protocol?: string;
  /** `xds.cluster_name`: the upstream cluster. @default "app" */
  cluster?: string;
  /** `xds.route_name`: "" for an unnamed route. @default "" */
  route?: string;
}

/** Options of {@linkcode ProxyWasmHost.createVm}. */
export interface VmOptions {
  /** Plugin configuration text. @default "" */
  configuration?: string;
  /** `root_id` of the plugin. @default "lastcall_inflight" */
  rootId?: string;
  /** `vm_id`: VMs with the same id share data. @default "lastcall_inflight" */
  vmId?: string;
}

interface SharedEntry { value: Uint8Array; cas: number }

/** One host call of a VM that touches process-wide state, as the race hooks see it. */
export interface HostCallPoint {
  /** The calling VM. */
  readonly vm: FilterVm;
  /** The import called. */
  readonly call: "proxy_get_shared_data" | "proxy_set_shared_data" | "proxy_increment_metric" | "proxy_get_metric" | "proxy_http_call";
  /** Shared-data key, metric name (`wasmcustom.…`) or cluster. */
  readonly key: string;
  /** The export of the VM that is running (e.g. `proxy_on_context_create`). */
  readonly callback: string;
  /** The context it runs for. */
  readonly context: number;
  /** The offset of a `proxy_increment_metric`. */
  readonly offset?: bigint;
}

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
    const bytes = typeof options.wasm === "object" ? options.wasm : readFileSync(options.wasm ?? FILTER_WASM);
    this.#module = new WebAssembly.Module(new Uint8Array(bytes));
    this.#clusters = new Set(options.clusters ?? ["lastcall_agent"]);
    this.logLevel = options.logLevel ?? 0;
    this.keepRequestHeaders = options.keepRequestHeaders ?? false;
    this.clock = options.clock ?? (() => BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e3)) * 1000n);
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
    if (!map) this.#shared.set(vmId, (map = new Map()));
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
    if (existing && existing.type !== type) throw new Error(`proxy-wasm host: metric ${name} redefined with another type`);
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

interface StreamState {
  requestHeaders?: [string, string][];
  root: number;
  startNs: bigint;
  address: string;
  http: boolean;
  protocol: string;
  cluster: string;
  route: string;
}

/** One VM ("worker thread") with its root context and stream contexts. */
export class FilterVm {
  /** Index of this VM in the host. */
  readonly index: number;
  /** Id of the root context. */
  readonly rootContextId: number;
  /** Result of proxy_on_configure. */
  configured = false;
  /** Tick period the root context asked for (0: none). */
  tickPeriodMs = 0;
  /** The error that trapped this VM, if any: Envoy stops calling a trapped VM. */
  failed: unknown;
  readonly #host: ProxyWasmHost;
  readonly #options: Required<VmOptions>;
  readonly #exports: Record<string, (...args: number[]) => number>;
  readonly #memory: WebAssembly.Memory;
  readonly #streams = new Map<number, StreamState>();
  #nextContextId = 1;
  #nextToken = 1;
  #current = 0;
  /** The effective context of the running callback (0: the one it runs for). */
  #effective = 0;
  #callback: string | undefined;
  #callResponse: { headers: [string, string][]; body: Uint8Array } | undefined;
  #metricIds = new Map<number, string>();
  #nextMetricId = [METRIC_COUNTER, METRIC_GAUGE, METRIC_HISTOGRAM];

  /** @internal use ProxyWasmHost.createVm */
  constructor(host: ProxyWasmHost, module: WebAssembly.Module, index: number, options: VmOptions) {
    this.#host = host;
    this.index = index;
    this.#options = {
      configuration: options.configuration ?? "",
      rootId: options.rootId ?? "lastcall_inflight",
      vmId: options.vmId ?? "lastcall_inflight",
    };
    const implemented = this.#imports();
    const env: Record<string, WebAssembly.ImportValue> = {};
    const imports: WebAssembly.Imports = { env };
    for (const entry of WebAssembly.Module.imports(module)) {
      const fn = entry.module === "env" ? implemented[entry.name] : undefined;
      const missing = () => { throw new Error(`proxy-wasm host: import ${entry.module}.${entry.name} is not implemented`); };
      const run = (fn ?? missing) as (...args: unknown[]) => unknown;
      (imports[entry.module] ??= {})[entry.name] = (...args: unknown[]) => {
        host.onImport?.(this, entry.name);
        return run(...args);
      };
    }
    const instance = new WebAssembly.Instance(module, imports);
    this.#exports = instance.exports as unknown as Record<string, (...args: number[]) => number>;
    this.#memory = instance.exports.memory as WebAssembly.Memory;
    this.rootContextId = this.#nextContextId++;
  }

  /** @internal */
  start(): void {
    this.#call("proxy_on_context_create", this.rootContextId, this.rootContextId, 0);
    this.#call("proxy_on_vm_start", this.rootContextId, this.rootContextId, 0);
    const size = Buffer.byteLength(this.#options.configuration);
    this.configured = this.#call("proxy_on_configure", this.rootContextId, this.rootContextId, size) === 1;
  }

  /** Fires the root context's timer once (as Envoy does every `tickPeriodMs`). */
  tick(): void {
    this.#call("proxy_on_tick", this.rootContextId, this.rootContextId);
  }

  /** Creates a stream (or connection) context; returns its id. */
  createStream(options: StreamOptions = {}): number {
    const id = options.id ?? this.#nextContextId;
    if (!Number.isInteger(id) || id <= 0 || id > 0xffffffff || id === this.rootContextId || this.#streams.has(id)) {
      throw new Error(`proxy-wasm host: context id ${id} is not free in VM ${this.index}`);
    }
    this.#nextContextId = Math.max(this.#nextContextId, id + 1);
    this.#streams.set(id, {
      root: this.rootContextId, startNs: options.startNs ?? this.#host.clock(),
      address: options.address ?? "127.0.0.1:10000", http: options.http ?? true,
      protocol: options.protocol ?? "HTTP/1.1", cluster: options.cluster ?? "app", route: options.route ?? "",
    });
    this.#call("proxy_on_context_create", id, id, this.rootContextId);
    return id;
  }

  /** Delivers request headers (names lower-cased, as Envoy keeps them); returns the filter status. */
  requestHeaders(id: number, headers: Record<string, string>, endOfStream = true): number {
    const state = this.#stream(id);
    state.requestHeaders = Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v]);
    return this.#call("proxy_on_request_headers", id, id, state.requestHeaders.length, endOfStream ? 1 : 0);
  }

  /** Delivers response headers; returns the filter status. */
  responseHeaders(id: number, count = 1, endOfStream = true): number {
    this.#stream(id);
    return this.#call("proxy_on_response_headers", id, id, count, endOfStream ? 1 : 0);
  }

  /** Network filter: a new connection on an existing context; returns the filter status. */
  newConnection(id: number): number {
    this.#stream(id);
    return this.#call("proxy_on_new_connection", id, id);
  }

  /** Network filter: the downstream closed (peer 1 local, 2 remote). */
  downstreamClose(id: number, peer = 2): void {
    this.#stream(id);
    this.#call("proxy_on_downstream_connection_close", id, id, peer);
  }

  /** Ends a stream as Envoy does: log, then done, then delete. */
  endStream(id: number): void {
    this.#stream(id);
    this.#call("proxy_on_log", id, id);
    this.#call("proxy_on_done", id, id);
    this.#call("proxy_on_delete", id, id);
    this.#streams.delete(id);
  }

  /** Live stream contexts. */
  get liveStreams(): number {
    return this.#streams.size;
  }

  /** Ids of the live stream contexts. */
  get streamIds(): number[] {
    return [...this.#streams.keys()];
  }

  /** Whether a callback of this VM is running (a VM runs one callback at a time). */
  get busy(): boolean {
    return this.#callback !== undefined;
  }

  /** Size of the VM's linear memory in bytes (it only grows). */
  get memorySize(): number {
    return this.#memory.buffer.byteLength;
  }

  /** A copy of the VM's whole linear memory (globals live outside it, in the instance). */
  memorySnapshot(): Uint8Array {
    return new Uint8Array(this.#memory.buffer).slice();
  }

  #stream(id: number): StreamState {
    const state = this.#streams.get(id);
    if (!state) throw new Error(`proxy-wasm host: no live context ${id} in VM ${this.index}`);
    return state;
  }

  // Runs one export as `context`; a trap marks the VM failed (Envoy stops calling it) and rethrows.
  #call(name: string, context: number, ...args: number[]): number {
    if (this.failed) throw new Error(`proxy-wasm host: VM ${this.index} failed earlier`, { cause: this.failed });
    if (this.#callback !== undefined) {
      throw new Error(`proxy-wasm host: VM ${this.index} is inside ${this.#callback}: a VM runs one callback at a time`);
    }
    const fn = this.#exports[name];
    if (typeof fn !== "function") return 0; // Envoy skips callbacks the module does not export
    this.#current = context;
    this.#effective = 0;
    this.#callback = name;
    try {
      return fn(...args) ?? 0;
    } catch (error) {
      this.failed = error;
      throw error;
    } finally {
      this.#current = 0;
      this.#effective = 0;
      this.#callback = undefined;
    }
  }

  // Runs one host call that touches process-wide state between the race hooks.
  #hooked(call: HostCallPoint["call"], key: string, body: () => number, offset?: bigint): number {
    const host = this.#host;
    const point: HostCallPoint = { vm: this, call, key, callback: this.#callback ?? "", context: this.#context(), offset };
    const injected = host.beforeHostCall?.(point);
    const result = typeof injected === "number" ? injected : body();
    host.afterHostCall?.(point, result);
    return result;
  }

  #deliverCallResponse(token: number, response: { headers: [string, string][]; body: Uint8Array } | undefined): void {
    this.#callResponse = response;
    try {
      this.#call("proxy_on_http_call_response", this.rootContextId, this.rootContextId, token,
        response?.headers.length ?? 0, response?.body.length ?? 0, 0);
    } finally {
      this.#callResponse = undefined;
    }
  }

  // --- memory helpers (re-read the buffer every time: malloc may grow memory) ---
  #bytes(ptr: number, size: number): Uint8Array {
    const end = ptr + size;
    if (ptr < 0 || end > this.#memory.buffer.byteLength) throw new RangeError("out of bounds");
    return new Uint8Array(this.#memory.buffer, ptr, size);
  }
  #string(ptr: number, size: number): string {
    return Buffer.from(this.#bytes(ptr, size)).toString("utf8");
  }
  #setU32(ptr: number, value: number): void {
    new DataView(this.#memory.buffer).setUint32(ptr, value, true);
  }
  // cpp-host copyToPointerSize: malloc in the module, copy, write pointer and size (0/0 if empty).
  #copyOut(data: Uint8Array, ptrPtr: number, sizePtr: number): number {
    let pointer = 0;
    if (data.length > 0) {
      pointer = this.#exports.malloc(data.length) >>> 0;
      if (pointer === 0) return WasmResult.InvalidMemoryAccess;
      this.#bytes(pointer, data.length).set(data);
    }
    this.#setU32(ptrPtr, pointer);
    this.#setU32(sizePtr, data.length);
    return WasmResult.Ok;
  }
  #pairs(ptr: number, size: number): [string, string][] {
    if (size < 4) return [];
    const view = new DataView(this.#memory.buffer, ptr, size);
    const count = view.getUint32(0, true);
    if (4 + count * 8 > size) return [];
    const result: [string, string][] = [];
    let offset = 4 + count * 8;
    for (let i = 0; i < count; i++) {
      const keySize = view.getUint32(4 + i * 8, true);
      const valueSize = view.getUint32(8 + i * 8, true);
      const key = this.#string(ptr + offset, keySize);
      offset += keySize + 1;
      const value = this.#string(ptr + offset, valueSize);
      offset += valueSize + 1;
      result.push([key, value]);
    }
    return result;
  }
  #isRoot(): boolean {
    return this.#context() === this.rootContextId;
  }
  /** The context host calls act for: the effective one if set (and still alive), else the running one. */
  #context(): number {
    const effective = this.#effective;
    return effective !== 0 && (effective === this.rootContextId || this.#streams.has(effective)) ? effective : this.#current;
  }
  // A property of the effective context (undefined: NotFound), as Envoy's CEL attributes serialise it.
  #property(path: string): Uint8Array | undefined {
    const context = this.#context();
    const stream = this.#streams.get(context);
    const readable = this.#host.keepRequestHeaders || (this.#callback === "proxy_on_request_headers" && this.#current === context);
    const header = (name: string) => (readable ? stream?.requestHeaders?.find(([k]) => k === name)?.[1] : undefined);
    switch (path) {
      case "plugin_root_id": return Buffer.from(this.#options.rootId);
      case "plugin_name": return Buffer.from("lastcall");
      case "plugin_vm_id": return Buffer.from(this.#options.vmId);
      case "request.time": {
        if (!stream?.http) return undefined;
        const bytes = Buffer.alloc(8);
        bytes.writeBigInt64LE(stream.startNs);
        return bytes;
      }
      case "request.method": {
        const method = header(":method");
        return method === undefined ? undefined : Buffer.from(method);
      }
      case "request.url_path": {
        const path = header(":path");
        return path === undefined ? undefined : Buffer.from(path.split("?")[0]!, "latin1");
      }
      case "destination.address": return stream === undefined ? undefined : Buffer.from(stream.address);
      case "request.protocol": return stream?.http ? Buffer.from(stream.protocol) : undefined;
      case "xds.cluster_name": return stream === undefined ? undefined : Buffer.from(stream.cluster);
      case "xds.route_name": return stream === undefined ? undefined : Buffer.from(stream.route);
      default: throw new Error(`proxy-wasm host: property ${path} is not modelled`);
    }
  }

  #imports(): Record<string, (...args: never[]) => unknown> {
    const host = this.#host;
    const vmId = () => this.#options.vmId;
    return {
      proxy_log: (level: number, ptr: number, size: number) => {
        if (level > 5) return WasmResult.BadArgument;
        if (level < host.logLevel) return WasmResult.Ok;
        host.logs.push({ level, message: this.#string(ptr, size), vm: this.index });
        return WasmResult.Ok;
      },
      proxy_get_property: (pathPtr: number, pathSize: number, ptrPtr: number, sizePtr: number) => {
        const path = this.#string(pathPtr, pathSize).split("\0").filter(Boolean).join(".");
        const value = this.#property(path);
        return value === undefined ? WasmResult.NotFound : this.#copyOut(value, ptrPtr, sizePtr);
      },
      proxy_set_effective_context: (id: number) => {
        const cid = id >>> 0;
        if (cid !== this.rootContextId && !this.#streams.has(cid)) return WasmResult.BadArgument;
        this.#effective = cid;
        return WasmResult.Ok;
      },
      proxy_get_current_time_nanoseconds: (resultPtr: number) => {
        new DataView(this.#memory.buffer).setBigUint64(resultPtr, BigInt.asUintN(64, host.clock()), true);
        return WasmResult.Ok;
      },
      proxy_get_buffer_bytes: (type: number, start: number, length: number, ptrPtr: number, sizePtr: number) => {
        let buffer: Uint8Array | undefined;
        if (type === BUFFER_PLUGIN_CONFIGURATION) buffer = Buffer.from(this.#options.configuration);
        else if (type === BUFFER_VM_CONFIGURATION) buffer = new Uint8Array(0);
        else if (type === BUFFER_HTTP_CALL_RESPONSE_BODY) buffer = this.#callResponse?.body;
        else if (type > 8) return WasmResult.BadArgument;
        if (!buffer) return WasmResult.NotFound;
        if (start > start + length) return WasmResult.BadArgument;
        if (start + length > buffer.length) length = buffer.length - start; // don't overread
        if (length > 0) return this.#copyOut(buffer.subarray(start, start + length), ptrPtr, sizePtr);
        return WasmResult.Ok;
      },
      proxy_get_header_map_value: (type: number, keyPtr: number, keySize: number, ptrPtr: number, sizePtr: number) => {
        if (type > 7) return WasmResult.BadArgument;
        let map: [string, string][] | undefined;
        if (type === HEADERS_REQUEST) map = this.#streams.get(this.#context())?.requestHeaders;
        else if (type === HEADERS_HTTP_CALL_RESPONSE) map = this.#callResponse?.headers;
        else throw new Error(`proxy-wasm host: header map ${type} is not modelled`);
        if (!map) return WasmResult.BadArgument; // Envoy: the map is not available now
        const key = this.#string(keyPtr, keySize).toLowerCase();
        const found = map.filter(([k]) => k === key).map(([, v]) => v);
        if (found.length === 0) return WasmResult.NotFound;
        return this.#copyOut(Buffer.from(found.join(","), type === HEADERS_REQUEST ? "latin1" : "utf8"), ptrPtr, sizePtr);
      },
      proxy_get_shared_data: (keyPtr: number, keySize: number, ptrPtr: number, sizePtr: number, casPtr: number) => {
        const key = this.#string(keyPtr, keySize);
        return this.#hooked("proxy_get_shared_data", key, () => {
          const entry = host.getShared(vmId(), key);
          if (!entry) return WasmResult.NotFound;
          const result = this.#copyOut(entry.value, ptrPtr, sizePtr);
          if (result !== WasmResult.Ok) return result;
          this.#setU32(casPtr, entry.cas);
          return WasmResult.Ok;
        });
      },
      proxy_set_shared_data: (keyPtr: number, keySize: number, valuePtr: number, valueSize: number, cas: number) => {
        const key = this.#string(keyPtr, keySize);
        const value = this.#bytes(valuePtr, valueSize).slice();
        return this.#hooked("proxy_set_shared_data", key, () => host.setShared(vmId(), key, value, cas >>> 0));
      },
      proxy_define_metric: (type: number, namePtr: number, nameSize: number, idPtr: number) => {
        if (type > METRIC_HISTOGRAM) return WasmResult.BadArgument;
        const name = `wasmcustom.${this.#string(namePtr, nameSize)}`;
        host.defineStat(type, name);
        const id = this.#nextMetricId[type]!;
        this.#nextMetricId[type] = id + 4;
        this.#metricIds.set(id, name);
        this.#setU32(idPtr, id);
        return WasmResult.Ok;
      },
      proxy_increment_metric: (id: number, offset: bigint) => {
        const type = id & 3;
        const name = this.#metricIds.get(id);
        if (type === METRIC_HISTOGRAM) return WasmResult.BadArgument;
        if (name === undefined) return WasmResult.NotFound;
        if (type === METRIC_COUNTER && offset <= 0n) return WasmResult.BadArgument;
        return this.#hooked("proxy_increment_metric", name, () => {
          host.addStat(name, offset);
          return WasmResult.Ok;
        }, offset);
      },
      proxy_get_metric: (id: number, resultPtr: number) => {
        const type = id & 3;
        const name = this.#metricIds.get(id);
        if (type === METRIC_HISTOGRAM) return WasmResult.BadArgument;
        if (name === undefined) return WasmResult.NotFound;
        return this.#hooked("proxy_get_metric", name, () => {
          new DataView(this.#memory.buffer).setBigUint64(resultPtr, BigInt.asUintN(64, host.statValue(name)), true);
          return WasmResult.Ok;
        });
      },
      proxy_set_tick_period_milliseconds: (periodMs: number) => {
        if (!this.#isRoot() && !this.#streams.has(this.#context())) return WasmResult.BadArgument;
        this.tickPeriodMs = periodMs >>> 0; // Envoy: the calling context's root context's timer
        return WasmResult.Ok;
      },
      proxy_http_call: (
        uriPtr: number, uriSize: number, headersPtr: number, headersSize: number, bodyPtr: number, bodySize: number,
        trailersPtr: number, trailersSize: number, timeoutMs: number, tokenPtr: number,
      ) => {
        const cluster = this.#string(uriPtr, uriSize);
        const headers = this.#pairs(headersPtr, headersSize);
        const body = this.#string(bodyPtr, bodySize);
        this.#pairs(trailersPtr, trailersSize);
        this.#setU32(tokenPtr, 0);
        return this.#hooked("proxy_http_call", cluster, () => this.#dispatch(cluster, headers, body, timeoutMs, tokenPtr));
      },
    } as Record<string, (...args: never[]) => unknown>;
  }

  // proxy_http_call once its arguments are read: Envoy's checks, then a call for the test to settle.
  #dispatch(cluster: string, headers: [string, string][], body: string, timeoutMs: number, tokenPtr: number): number {
    const host = this.#host;
    if ((timeoutMs | 0) < 0 || !host.hasCluster(cluster)) return WasmResult.BadArgument;
    const names = new Set(headers.map(([k]) => k));
    if (!names.has(":path") || !names.has(":method") || !names.has(":authority")) return WasmResult.BadArgument;
    const token = this.#nextToken++;
    const vm = this;
    const effectiveContext = this.#context();
    const call: HttpCall = {
      vm, token, effectiveContext, cluster, headers, body, timeoutMs: timeoutMs >>> 0, settled: false,
      respond(status, responseBody = "", extra = []) {
        if (call.settled) throw new Error(`proxy-wasm host: call ${token} already settled`);
        call.settled = true;
        vm.#deliverCallResponse(token, { headers: [[":status", String(status)], ...extra], body: Buffer.from(responseBody) });
      },
      fail() {
        if (call.settled) throw new Error(`proxy-wasm host: call ${token} already settled`);
        call.settled = true;
        vm.#deliverCallResponse(token, undefined);
      },
    };
    host.calls.push(call);
    this.#setU32(tokenPtr, token);
    return WasmResult.Ok;
  }
}
