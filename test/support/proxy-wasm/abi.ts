// The proxy-wasm ABI 0.2.x as the in-process host models it: result codes, enum values, and the
// shapes a test sees (logs, http calls, race hook points, options). See docs/testing.md.
import { fileURLToPath } from "node:url";
import type { FilterVm } from "./vm.ts";

/** proxy-wasm `WasmResult` codes. */
export const WasmResult = {
  Ok: 0,
  NotFound: 1,
  BadArgument: 2,
  InvalidMemoryAccess: 6,
  CasMismatch: 8,
  InternalFailure: 10,
} as const;

/** Default module: the filter built by `npm run build:filter`. */
export const FILTER_WASM = fileURLToPath(new URL("../../../dist/filter.wasm", import.meta.url));

export const METRIC_COUNTER = 0;
export const METRIC_GAUGE = 1;
export const METRIC_HISTOGRAM = 2;
export const HEADERS_REQUEST = 0;
export const HEADERS_HTTP_CALL_RESPONSE = 6;
export const BUFFER_HTTP_CALL_RESPONSE_BODY = 4;
export const BUFFER_VM_CONFIGURATION = 6;
export const BUFFER_PLUGIN_CONFIGURATION = 7;

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

/** A shared-data value and its compare-and-swap stamp. */
export interface SharedEntry {
  value: Uint8Array;
  cas: number;
}

/** One host call of a VM that touches process-wide state, as the race hooks see it. */
export interface HostCallPoint {
  /** The calling VM. */
  readonly vm: FilterVm;
  /** The import called. */
  readonly call:
    | "proxy_get_shared_data"
    | "proxy_set_shared_data"
    | "proxy_increment_metric"
    | "proxy_get_metric"
    | "proxy_http_call";
  /** Shared-data key, metric name (`wasmcustom.…`) or cluster. */
  readonly key: string;
  /** The export of the VM that is running (e.g. `proxy_on_context_create`). */
  readonly callback: string;
  /** The context it runs for. */
  readonly context: number;
  /** The offset of a `proxy_increment_metric`. */
  readonly offset?: bigint;
}

/** What the host knows of one stream (or connection) context. */
export interface StreamState {
  requestHeaders?: [string, string][];
  root: number;
  startNs: bigint;
  address: string;
  http: boolean;
  protocol: string;
  cluster: string;
  route: string;
}
