// The module's proxy-wasm ABI exports: a flat context map and one-line dispatch, nothing per
// stream but a map entry (the SDK's stock exports build strings of every live id per stream).
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

/** Shared queues are not used. */
export function proxy_on_queue_ready(rootId: u32, token: u32): void {}

/** Request headers: the only hook that can uncount a stream early (excluded paths). */
export function proxy_on_request_headers(id: u32, headers: u32, endOfStream: u32): u32 {
  if (streams.has(id)) streams.get(id).onRequestHeaders();
  return 0;
}

/** Request body: passed through. */
export function proxy_on_request_body(id: u32, size: u32, endOfStream: u32): u32 { return 0; }

/** Request trailers: passed through. */
export function proxy_on_request_trailers(id: u32, trailers: u32): u32 { return 0; }

/** Response headers: passed through. */
export function proxy_on_response_headers(id: u32, headers: u32, endOfStream: u32): u32 { return 0; }

/** Response body: passed through. */
export function proxy_on_response_body(id: u32, size: u32, endOfStream: u32): u32 { return 0; }

/** Response trailers: passed through. */
export function proxy_on_response_trailers(id: u32, trailers: u32): u32 { return 0; }

/** New TCP connection (network filter): already counted at context creation. */
export function proxy_on_new_connection(id: u32): u32 { return 0; }

/** Downstream bytes (network filter): passed through. */
export function proxy_on_downstream_data(id: u32, size: u32, endOfStream: u32): u32 { return 0; }

/** Upstream bytes (network filter): passed through. */
export function proxy_on_upstream_data(id: u32, size: u32, endOfStream: u32): u32 { return 0; }

/** Downstream close (network filter): the count drops at deletion. */
export function proxy_on_downstream_connection_close(id: u32, peer: u32): void {}

/** Upstream close (network filter): the count drops at deletion. */
export function proxy_on_upstream_connection_close(id: u32, peer: u32): void {}

/** Access-log time: Envoy calls it before done; nothing to do. */
export function proxy_on_log(id: u32): void {}

/** Done: this context has nothing pending. */
export function proxy_on_done(id: u32): u32 { return 1; }

/** Deletion: a stream leaves the count exactly once; a root is forgotten. */
export function proxy_on_delete(id: u32): void {
  if (streams.has(id)) {
    streams.get(id).onDelete();
    streams.delete(id);
  } else {
    roots.delete(id);
  }
}
