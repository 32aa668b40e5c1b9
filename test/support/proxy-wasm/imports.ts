// The host functions a VM imports (`env.proxy_*`), as proxy-wasm-cpp-host's exports.cc and
// Envoy's context.cc implement them; each acts on one VM through its VmSide.
import {
  BUFFER_HTTP_CALL_RESPONSE_BODY,
  BUFFER_PLUGIN_CONFIGURATION,
  BUFFER_VM_CONFIGURATION,
  HEADERS_HTTP_CALL_RESPONSE,
  HEADERS_REQUEST,
  type HostCallPoint,
  METRIC_COUNTER,
  METRIC_HISTOGRAM,
  type StreamState,
  WasmResult,
} from "./abi.ts";
import type { ProxyWasmHost } from "./host.ts";
import type { VmMemory } from "./memory.ts";

/** What the imports of one VM read and change: its state, as the VM hands it to them. */
export interface VmSide {
  readonly index: number;
  readonly rootContextId: number;
  readonly host: ProxyWasmHost;
  readonly memory: VmMemory;
  readonly vmId: string;
  readonly configuration: string;
  readonly streams: ReadonlyMap<number, StreamState>;
  /** The http call response being delivered, if any. */
  callResponse(): { headers: [string, string][]; body: Uint8Array } | undefined;
  /** The context host calls act for: the effective one if set (and alive), else the running one. */
  context(): number;
  setEffective(id: number): void;
  property(path: string): Uint8Array | undefined;
  setTickPeriod(periodMs: number): void;
  /** Defines a metric for this VM; returns its id (type in the low 2 bits). */
  defineMetric(type: number, name: string): number;
  metricName(id: number): string | undefined;
  /** Runs a host call that touches process-wide state between the race hooks. */
  hooked(call: HostCallPoint["call"], key: string, body: () => number, offset?: bigint): number;
  /** proxy_http_call once its arguments are read. */
  dispatch(
    cluster: string,
    headers: [string, string][],
    body: string,
    timeoutMs: number,
    tokenPtr: number,
  ): number;
}

/** The `env` imports of one VM, by name. */
export function hostImports(vm: VmSide): Record<string, (...args: never[]) => unknown> {
  const { host, memory } = vm;
  return {
    proxy_log: (level: number, ptr: number, size: number) => {
      if (level > 5) return WasmResult.BadArgument;
      if (level < host.logLevel) return WasmResult.Ok;
      host.logs.push({ level, message: memory.string(ptr, size), vm: vm.index });
      return WasmResult.Ok;
    },
    proxy_get_property: (pathPtr: number, pathSize: number, ptrPtr: number, sizePtr: number) => {
      const path = memory.string(pathPtr, pathSize).split("\0").filter(Boolean).join(".");
      const value = vm.property(path);
      return value === undefined ? WasmResult.NotFound : memory.copyOut(value, ptrPtr, sizePtr);
    },
    proxy_set_effective_context: (id: number) => {
      const cid = id >>> 0;
      if (cid !== vm.rootContextId && !vm.streams.has(cid)) return WasmResult.BadArgument;
      vm.setEffective(cid);
      return WasmResult.Ok;
    },
    proxy_get_current_time_nanoseconds: (resultPtr: number) => {
      memory.setU64(resultPtr, host.clock());
      return WasmResult.Ok;
    },
    proxy_get_buffer_bytes: (
      type: number,
      start: number,
      length: number,
      ptrPtr: number,
      sizePtr: number,
    ) => {
      let buffer: Uint8Array | undefined;
      if (type === BUFFER_PLUGIN_CONFIGURATION) buffer = Buffer.from(vm.configuration);
      else if (type === BUFFER_VM_CONFIGURATION) buffer = new Uint8Array(0);
      else if (type === BUFFER_HTTP_CALL_RESPONSE_BODY) buffer = vm.callResponse()?.body;
      else if (type > 8) return WasmResult.BadArgument;
      if (!buffer) return WasmResult.NotFound;
      if (start > start + length) return WasmResult.BadArgument;
      if (start + length > buffer.length) length = buffer.length - start; // don't overread
      if (length > 0) {
        return memory.copyOut(buffer.subarray(start, start + length), ptrPtr, sizePtr);
      }
      return WasmResult.Ok;
    },
    proxy_get_header_map_value: (
      type: number,
      keyPtr: number,
      keySize: number,
      ptrPtr: number,
      sizePtr: number,
    ) => {
      if (type > 7) return WasmResult.BadArgument;
      let map: [string, string][] | undefined;
      if (type === HEADERS_REQUEST) map = vm.streams.get(vm.context())?.requestHeaders;
      else if (type === HEADERS_HTTP_CALL_RESPONSE) map = vm.callResponse()?.headers;
      else throw new Error(`proxy-wasm host: header map ${type} is not modelled`);
      if (!map) return WasmResult.BadArgument; // Envoy: the map is not available now
      const key = memory.string(keyPtr, keySize).toLowerCase();
      const found = map.filter(([k]) => k === key).map(([, v]) => v);
      if (found.length === 0) return WasmResult.NotFound;
      return memory.copyOut(
        Buffer.from(found.join(","), type === HEADERS_REQUEST ? "latin1" : "utf8"),
        ptrPtr,
        sizePtr,
      );
    },
    proxy_get_shared_data: (
      keyPtr: number,
      keySize: number,
      ptrPtr: number,
      sizePtr: number,
      casPtr: number,
    ) => {
      const key = memory.string(keyPtr, keySize);
      return vm.hooked("proxy_get_shared_data", key, () => {
        const entry = host.getShared(vm.vmId, key);
        if (!entry) return WasmResult.NotFound;
        const result = memory.copyOut(entry.value, ptrPtr, sizePtr);
        if (result !== WasmResult.Ok) return result;
        memory.setU32(casPtr, entry.cas);
        return WasmResult.Ok;
      });
    },
    proxy_set_shared_data: (
      keyPtr: number,
      keySize: number,
      valuePtr: number,
      valueSize: number,
      cas: number,
    ) => {
      const key = memory.string(keyPtr, keySize);
      const value = memory.bytes(valuePtr, valueSize).slice();
      return vm.hooked(
        "proxy_set_shared_data",
        key,
        () => host.setShared(vm.vmId, key, value, cas >>> 0),
      );
    },
    proxy_define_metric: (type: number, namePtr: number, nameSize: number, idPtr: number) => {
      if (type > METRIC_HISTOGRAM) return WasmResult.BadArgument;
      const name = `wasmcustom.${memory.string(namePtr, nameSize)}`;
      host.defineStat(type, name);
      memory.setU32(idPtr, vm.defineMetric(type, name));
      return WasmResult.Ok;
    },
    proxy_increment_metric: (id: number, offset: bigint) => {
      const type = id & 3;
      const name = vm.metricName(id);
      if (type === METRIC_HISTOGRAM) return WasmResult.BadArgument;
      if (name === undefined) return WasmResult.NotFound;
      if (type === METRIC_COUNTER && offset <= 0n) return WasmResult.BadArgument;
      return vm.hooked("proxy_increment_metric", name, () => {
        host.addStat(name, offset);
        return WasmResult.Ok;
      }, offset);
    },
    proxy_get_metric: (id: number, resultPtr: number) => {
      const type = id & 3;
      const name = vm.metricName(id);
      if (type === METRIC_HISTOGRAM) return WasmResult.BadArgument;
      if (name === undefined) return WasmResult.NotFound;
      return vm.hooked("proxy_get_metric", name, () => {
        memory.setU64(resultPtr, host.statValue(name));
        return WasmResult.Ok;
      });
    },
    proxy_set_tick_period_milliseconds: (periodMs: number) => {
      const context = vm.context();
      if (context !== vm.rootContextId && !vm.streams.has(context)) return WasmResult.BadArgument;
      vm.setTickPeriod(periodMs >>> 0); // Envoy: the calling context's root context's timer
      return WasmResult.Ok;
    },
    proxy_http_call: (
      uriPtr: number,
      uriSize: number,
      headersPtr: number,
      headersSize: number,
      bodyPtr: number,
      bodySize: number,
      trailersPtr: number,
      trailersSize: number,
      timeoutMs: number,
      tokenPtr: number,
    ) => {
      const cluster = memory.string(uriPtr, uriSize);
      const headers = memory.pairs(headersPtr, headersSize);
      const body = memory.string(bodyPtr, bodySize);
      memory.pairs(trailersPtr, trailersSize);
      memory.setU32(tokenPtr, 0);
      return vm.hooked(
        "proxy_http_call",
        cluster,
        () => vm.dispatch(cluster, headers, body, timeoutMs, tokenPtr),
      );
    },
  } as Record<string, (...args: never[]) => unknown>;
}
