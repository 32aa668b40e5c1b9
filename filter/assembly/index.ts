// The module's proxy-wasm ABI exports: a flat context map and one-line dispatch, nothing per
// stream but a map entry (the SDK's stock exports build strings of every live id per stream).
// Only the callbacks the filter acts on are exported: Envoy (proxy-wasm-cpp-host) does not enter
// the VM for a callback the module does not export and goes on as if it answered Continue (or,
// for `proxy_on_done`, "done"). So a request costs three calls into the VM (context create,
// request headers, delete) instead of seven or more for pass-through hooks (response headers and
// body, log, done; request body and trailers; the network filter's data and close events).
import "./abort";
import { Root } from "./root";
import { Stream } from "./request";

export { malloc, malloc as proxy_on_memory_allocate } from "./memory";

const roots = new Map<u32, Root>();
const streams = new Map<u32, Stream>();

/** ABI version marker: proxy-wasm 0.2.0. */
export function proxy_abi_version_0_2_0(): void {}

/** A root context (rootId 0) or a stream/connection context of an existing root. */
export function proxy_on_context_create(id: u32, rootId: u32): void {
  if (rootId == 0) roots.set(id, new Root());
  else if (roots.has(rootId)) streams.set(id, new Stream(roots.get(rootId)));
}

/** VM start: nothing to do before configuration. */
export function proxy_on_vm_start(rootId: u32, vmConfigSize: u32): u32 {
  return 1;
}

/** Plugin configuration: 0 refuses it. */
export function proxy_on_configure(rootId: u32, size: u32): u32 {
  return roots.has(rootId) && roots.get(rootId).configure(size) ? 1 : 0;
}

/** Heartbeat timer of one root context. */
export function proxy_on_tick(rootId: u32): void {
  if (roots.has(rootId)) roots.get(rootId).tick();
}

/** Answer (or failure, with no headers) of a report call. */
export function proxy_on_http_call_response(rootId: u32, token: u32, headers: u32, bodySize: u32, trailers: u32): void {
  if (roots.has(rootId)) roots.get(rootId).onHttpCallResponse();
}

/** Request headers: the only hook that can uncount a stream early (excluded paths). */
export function proxy_on_request_headers(id: u32, headers: u32, endOfStream: u32): u32 {
  if (streams.has(id)) streams.get(id).onRequestHeaders();
  return 0;
}

/** Deletion: a stream leaves the count exactly once; a root is forgotten. */
export function proxy_on_delete(id: u32): void {
  if (streams.has(id)) {
    streams.get(id).onDelete();
    streams.delete(id);
  } else {
    roots.delete(id);
  }
}
