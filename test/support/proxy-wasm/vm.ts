// One VM ("worker thread") of the in-process proxy-wasm host: its root and stream contexts, and
// the callbacks in Envoy's order (create → headers → log → done → delete).
import {
  type HostCallPoint,
  type HttpCall,
  METRIC_COUNTER,
  METRIC_GAUGE,
  METRIC_HISTOGRAM,
  type StreamOptions,
  type StreamState,
  type VmOptions,
  WasmResult,
} from "./abi.ts";
import type { ProxyWasmHost } from "./host.ts";
import { hostImports, type VmSide } from "./imports.ts";
import { VmMemory } from "./memory.ts";
import { propertyValue } from "./properties.ts";

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
  readonly #memory: VmMemory;
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
    this.rootContextId = this.#nextContextId++;
    this.#options = {
      configuration: options.configuration ?? "",
      rootId: options.rootId ?? "lastcall_inflight",
      vmId: options.vmId ?? "lastcall_inflight",
    };
    // Both read the instance's exports, which exist only once the imports below are built.
    this.#memory = new VmMemory(
      () => this.#exports.memory as unknown as WebAssembly.Memory,
      (size) => this.#exports.malloc(size),
    );
    const implemented = hostImports(this.#side());
    const env: Record<string, WebAssembly.ImportValue> = {};
    const imports: WebAssembly.Imports = { env };
    for (const entry of WebAssembly.Module.imports(module)) {
      const fn = entry.module === "env" ? implemented[entry.name] : undefined;
      const missing = () => {
        throw new Error(`proxy-wasm host: import ${entry.module}.${entry.name} is not implemented`);
      };
      const run = (fn ?? missing) as (...args: unknown[]) => unknown;
      (imports[entry.module] ??= {})[entry.name] = (...args: unknown[]) => {
        host.onImport?.(this, entry.name);
        return run(...args);
      };
    }
    const instance = new WebAssembly.Instance(module, imports);
    this.#exports = instance.exports as unknown as Record<string, (...args: number[]) => number>;
  }

  /** @internal */
  start(): void {
    this.#call("proxy_on_context_create", this.rootContextId, this.rootContextId, 0);
    this.#call("proxy_on_vm_start", this.rootContextId, this.rootContextId, 0);
    const size = Buffer.byteLength(this.#options.configuration);
    this.configured =
      this.#call("proxy_on_configure", this.rootContextId, this.rootContextId, size) === 1;
  }

  /** Fires the root context's timer once (as Envoy does every `tickPeriodMs`). */
  tick(): void {
    this.#call("proxy_on_tick", this.rootContextId, this.rootContextId);
  }

  /** Creates a stream (or connection) context; returns its id. */
  createStream(options: StreamOptions = {}): number {
    const id = options.id ?? this.#nextContextId;
    if (
      !Number.isInteger(id) || id <= 0 || id > 0xffffffff || id === this.rootContextId ||
      this.#streams.has(id)
    ) {
      throw new Error(`proxy-wasm host: context id ${id} is not free in VM ${this.index}`);
    }
    this.#nextContextId = Math.max(this.#nextContextId, id + 1);
    this.#streams.set(id, {
      root: this.rootContextId,
      startNs: options.startNs ?? this.#host.clock(),
      address: options.address ?? "127.0.0.1:10000",
      http: options.http ?? true,
      protocol: options.protocol ?? "HTTP/1.1",
      cluster: options.cluster ?? "app",
      route: options.route ?? "",
    });
    this.#call("proxy_on_context_create", id, id, this.rootContextId);
    return id;
  }

  /** Delivers request headers (names lower-cased, as Envoy keeps them); returns the filter status. */
  requestHeaders(id: number, headers: Record<string, string>, endOfStream = true): number {
    const state = this.#stream(id);
    state.requestHeaders = Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v]);
    return this.#call(
      "proxy_on_request_headers",
      id,
      id,
      state.requestHeaders.length,
      endOfStream ? 1 : 0,
    );
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
    if (this.failed) {
      throw new Error(`proxy-wasm host: VM ${this.index} failed earlier`, { cause: this.failed });
    }
    if (this.#callback !== undefined) {
      throw new Error(
        `proxy-wasm host: VM ${this.index} is inside ${this.#callback}: a VM runs one callback at a time`,
      );
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
    const point: HostCallPoint = {
      vm: this,
      call,
      key,
      callback: this.#callback ?? "",
      context: this.#context(),
      offset,
    };
    const injected = host.beforeHostCall?.(point);
    const result = typeof injected === "number" ? injected : body();
    host.afterHostCall?.(point, result);
    return result;
  }

  #deliverCallResponse(
    token: number,
    response: { headers: [string, string][]; body: Uint8Array } | undefined,
  ): void {
    this.#callResponse = response;
    try {
      this.#call(
        "proxy_on_http_call_response",
        this.rootContextId,
        this.rootContextId,
        token,
        response?.headers.length ?? 0,
        response?.body.length ?? 0,
        0,
      );
    } finally {
      this.#callResponse = undefined;
    }
  }

  /** The context host calls act for: the effective one if set (and still alive), else the running one. */
  #context(): number {
    const effective = this.#effective;
    return effective !== 0 && (effective === this.rootContextId || this.#streams.has(effective))
      ? effective
      : this.#current;
  }

  // What this VM's imports act on (imports.ts).
  #side(): VmSide {
    const side: VmSide = {
      index: this.index,
      rootContextId: this.rootContextId,
      host: this.#host,
      memory: this.#memory,
      vmId: this.#options.vmId,
      configuration: this.#options.configuration,
      streams: this.#streams,
      callResponse: () => this.#callResponse,
      context: () => this.#context(),
      setEffective: (id) => (this.#effective = id),
      property: (path) => {
        const context = this.#context();
        return propertyValue(path, {
          rootId: this.#options.rootId,
          vmId: this.#options.vmId,
          stream: this.#streams.get(context),
          headersReadable: this.#host.keepRequestHeaders ||
            (this.#callback === "proxy_on_request_headers" && this.#current === context),
        });
      },
      setTickPeriod: (periodMs) => (this.tickPeriodMs = periodMs),
      defineMetric: (type, name) => {
        const id = this.#nextMetricId[type]!;
        this.#nextMetricId[type] = id + 4;
        this.#metricIds.set(id, name);
        return id;
      },
      metricName: (id) => this.#metricIds.get(id),
      hooked: (call, key, body, offset) => this.#hooked(call, key, body, offset),
      dispatch: (cluster, headers, body, timeoutMs, tokenPtr) =>
        this.#dispatch(cluster, headers, body, timeoutMs, tokenPtr),
    };
    return side;
  }

  // proxy_http_call once its arguments are read: Envoy's checks, then a call for the test to settle.
  #dispatch(
    cluster: string,
    headers: [string, string][],
    body: string,
    timeoutMs: number,
    tokenPtr: number,
  ): number {
    const host = this.#host;
    if ((timeoutMs | 0) < 0 || !host.hasCluster(cluster)) return WasmResult.BadArgument;
    const names = new Set(headers.map(([k]) => k));
    if (!names.has(":path") || !names.has(":method") || !names.has(":authority")) {
      return WasmResult.BadArgument;
    }
    const token = this.#nextToken++;
    const settle = (response: { headers: [string, string][]; body: Uint8Array } | undefined) => {
      if (call.settled) throw new Error(`proxy-wasm host: call ${token} already settled`);
      call.settled = true;
      this.#deliverCallResponse(token, response);
    };
    const call: HttpCall = {
      vm: this,
      token,
      effectiveContext: this.#context(),
      cluster,
      headers,
      body,
      timeoutMs: timeoutMs >>> 0,
      settled: false,
      respond: (status, responseBody = "", extra = []) =>
        settle({
          headers: [[":status", String(status)], ...extra],
          body: Buffer.from(responseBody),
        }),
      fail: () => settle(undefined),
    };
    host.calls.push(call);
    this.#memory.setU32(tokenPtr, token);
    return WasmResult.Ok;
  }
}
