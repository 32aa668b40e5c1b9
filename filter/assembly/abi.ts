// Raw proxy-wasm ABI 0.2.x imports: only the ones this filter calls. Declared here instead of
// taken from @solo-io/proxy-runtime, whose `get_metric` wrapper overwrites the gauge it reads.

/** Result codes shared by every host call (proxy-wasm `WasmResult`). */
export const enum Result { Ok = 0, NotFound = 1, BadArgument = 2 }

/** Log levels of `proxy_log`. */
export const enum LogLevel { Trace = 0, Debug = 1, Info = 2, Warn = 3, Error = 4, Critical = 5 }

/** Metric kinds of `proxy_define_metric`. */
export const enum MetricType { Counter = 0, Gauge = 1 }

/** Header maps of `proxy_get_header_map_value`. */
export const enum HeaderMap { RequestHeaders = 0, HttpCallResponseHeaders = 6 }

/** Buffers of `proxy_get_buffer_bytes`. */
export const enum Buffer { PluginConfiguration = 7 }

// @ts-ignore: decorator
@external("env", "proxy_log")
/** Writes one line to the host's log at the given level. */
export declare function proxy_log(level: u32, ptr: usize, size: usize): u32;

// @ts-ignore: decorator
@external("env", "proxy_get_buffer_bytes")
/** Copies part of a host buffer into module memory allocated with `malloc`. */
export declare function proxy_get_buffer_bytes(type: u32, start: u32, length: u32, ptrOut: usize, sizeOut: usize): u32;

// @ts-ignore: decorator
@external("env", "proxy_get_header_map_value")
/** Copies one header value into module memory allocated with `malloc`. */
export declare function proxy_get_header_map_value(type: u32, keyPtr: usize, keySize: usize, ptrOut: usize, sizeOut: usize): u32;

// @ts-ignore: decorator
@external("env", "proxy_get_property")
/** Copies one host property (path segments separated by NUL) into module memory. */
export declare function proxy_get_property(pathPtr: usize, pathSize: usize, ptrOut: usize, sizeOut: usize): u32;

// @ts-ignore: decorator
@external("env", "proxy_define_metric")
/** Defines (or finds) a `wasmcustom.<name>` stat and returns its per-VM id. */
export declare function proxy_define_metric(type: u32, namePtr: usize, nameSize: usize, idOut: usize): u32;

// @ts-ignore: decorator
@external("env", "proxy_increment_metric")
/** Adds `offset` to a counter (offset > 0) or gauge, atomically across worker VMs. */
export declare function proxy_increment_metric(id: u32, offset: i64): u32;

// @ts-ignore: decorator
@external("env", "proxy_get_metric")
/** Reads a counter's or gauge's current value (a gauge: the process-wide value) into `resultOut` (u64). */
export declare function proxy_get_metric(id: u32, resultOut: usize): u32;

// @ts-ignore: decorator
@external("env", "proxy_set_tick_period_milliseconds")
/** Sets the calling root context's timer period; 0 disables it. */
export declare function proxy_set_tick_period_milliseconds(periodMs: u32): u32;

// @ts-ignore: decorator
@external("env", "proxy_http_call")
/** Dispatches an HTTP call to a cluster; the answer arrives in `proxy_on_http_call_response`. */
export declare function proxy_http_call(
  clusterPtr: usize, clusterSize: usize, headersPtr: usize, headersSize: usize, bodyPtr: usize, bodySize: usize,
  trailersPtr: usize, trailersSize: usize, timeoutMs: u32, tokenOut: usize,
): u32;

// @ts-ignore: decorator
@external("env", "proxy_set_effective_context")
/** Makes later host calls of this callback act for context `id` (a live stream, or a root). */
export declare function proxy_set_effective_context(id: u32): u32;

