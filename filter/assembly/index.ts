// The module's proxy-wasm ABI exports: a flat context map and one-line dispatch. A stream is
// counted from its creation to its deletion (count.ts): outside a drain that is two host calls
// and nothing else; no object, no map entry, unless a plugin of this VM has `exclude_paths`.
// Only the callbacks the filter acts on are exported: Envoy (proxy-wasm-cpp-host) does not enter
// the VM for a callback the module does not export and goes on as if it answered Continue (or,
// for `proxy_on_done`, "done"). So a request costs three calls into the VM (context create,
// request headers, delete).
import "./abort";
import { countEnd, countStart, draining } from "./count";
import { Root, forgetRoot, pushTransition } from "./root";

export { malloc, malloc as proxy_on_memory_allocate } from "./memory";

const roots = new Map<u32, Root>();
/** Roots of this VM whose plugin has `exclude_paths`: only then are streams' roots remembered. */
let excluding = 0;
/** The root of each live stream, while `excluding > 0`. */
const streamRoots = new Map<u32, u32>();
/** Streams that left the count early (an excluded path): their deletion does not count again. */
const uncounted = new Set<u32>();

function countExcluding(): void {
  excluding = 0;
  const all = roots.values();
  for (let i = 0; i < all.length; i++) if (all[i].config.excludePaths.length > 0) excluding++;
}

/** ABI version marker: proxy-wasm 0.2.0. */
export function proxy_abi_version_0_2_0(): void {}

/** A root context (rootId 0), or a stream/connection: in the count from now. */
export function proxy_on_context_create(id: u32, rootId: u32): void {
  if (rootId == 0) {
    roots.set(id, new Root());
    return;
  }
  countStart();
  if (excluding > 0) streamRoots.set(id, rootId);
  if (draining) pushTransition(true);
}

/** VM start: nothing to do before configuration. */
export function proxy_on_vm_start(rootId: u32, vmConfigSize: u32): u32 {
  return 1;
}

/** Plugin configuration: 0 refuses it. */
export function proxy_on_configure(rootId: u32, size: u32): u32 {
  if (!roots.has(rootId)) return 0;
  const ok = roots.get(rootId).configure(size);
  countExcluding();
  return ok ? 1 : 0;
}

/** Timer of one root context: heartbeat and metric flush. */
export function proxy_on_tick(rootId: u32): void {
  if (roots.has(rootId)) roots.get(rootId).tick();
}

/** Answer (or failure, with no headers) of a report call. */
export function proxy_on_http_call_response(rootId: u32, token: u32, headers: u32, bodySize: u32, trailers: u32): void {
  if (roots.has(rootId)) roots.get(rootId).onHttpCallResponse();
}

/** Request headers: an excluded path leaves the count now (exactly once). */
export function proxy_on_request_headers(id: u32, headers: u32, endOfStream: u32): u32 {
  if (excluding == 0 || !streamRoots.has(id)) return 0;
  const rootId = streamRoots.get(id);
  if (!roots.has(rootId) || uncounted.has(id) || !roots.get(rootId).isExcluded()) return 0;
  uncounted.add(id);
  countEnd(false);
  if (draining) pushTransition(false);
  return 0;
}

/** Deletion: a stream leaves the count exactly once; a root is forgotten. */
export function proxy_on_delete(id: u32): void {
  if (roots.has(id)) {
    const root = roots.get(id);
    roots.delete(id);
    forgetRoot(root, roots.values());
    countExcluding();
    return;
  }
  if (streamRoots.size > 0) streamRoots.delete(id);
  if (uncounted.size > 0 && uncounted.has(id)) {
    uncounted.delete(id);
    return;
  }
  countEnd(true);
  if (draining) pushTransition(false);
}
