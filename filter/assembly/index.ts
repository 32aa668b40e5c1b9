// The module's proxy-wasm ABI exports: a flat context map and one-line dispatch; only the callbacks
// the filter acts on.
import "./abort";
import { countEnd, countStart, pushing } from "./count";
import { keepRequest } from "./kept";
import { liveEnd, liveStart, ownsSlot } from "./live";
import { Root, forgetRoot, pushTransition } from "./root";

export { malloc, malloc as proxy_on_memory_allocate } from "./memory";

const roots = new Map<u32, Root>();
/** Roots of this VM whose plugin has `exclude_paths`: only then are streams' roots remembered. */
let excluding = 0;
/** The root of each live stream, while `excluding > 0`. */
const streamRoots = new Map<u32, u32>();
/** Streams that left the count early (an excluded path): their deletion does not count again. */
const uncounted = new Set<u32>();
/** Roots of this VM whose plugin has `holder_paths`: only then are methods and paths kept. */
let keeping = 0;
/** Whether request headers have anything to do (`excluding > 0 || keeping > 0`): one branch otherwise. */
let atHeaders = false;

function countHeaderWork(): void {
  excluding = 0;
  keeping = 0;
  const all = roots.values();
  for (let i = 0; i < all.length; i++) {
    if (all[i].config.excludePaths.length > 0) excluding++;
    if (all[i].config.holderPaths) keeping++;
  }
  atHeaders = excluding > 0 || keeping > 0;
}

/** ABI version marker: proxy-wasm 0.2.0. */
export function proxy_abi_version_0_2_0(): void {}

/** A root context (rootId 0), or a stream/connection: in the count from now. */
export function proxy_on_context_create(id: u32, rootId: u32): void {
  if (rootId == 0) {
    roots.set(id, new Root(id));
    return;
  }
  countStart();
  liveStart(id);
  if (excluding > 0) streamRoots.set(id, rootId);
  if (pushing) pushTransition(true);
}

/** VM start: nothing to do before configuration. */
export function proxy_on_vm_start(_rootId: u32, _vmConfigSize: u32): u32 {
  return 1;
}

/** Plugin configuration: 0 refuses it. */
export function proxy_on_configure(rootId: u32, size: u32): u32 {
  if (!roots.has(rootId)) return 0;
  const ok = roots.get(rootId).configure(size);
  countHeaderWork();
  return ok ? 1 : 0;
}

/** Timer of one root context: heartbeat and metric flush. */
export function proxy_on_tick(rootId: u32): void {
  if (roots.has(rootId)) roots.get(rootId).tick();
}

/** Answer (or failure, with no headers) of a report call. */
export function proxy_on_http_call_response(rootId: u32, _token: u32, _headers: u32, _bodySize: u32, _trailers: u32): void {
  if (roots.has(rootId)) roots.get(rootId).onHttpCallResponse();
}

/**
 * Request headers: an excluded path leaves the count now (exactly once); otherwise, with
 * `holder_paths`, a tracked stream's method and path are kept. Without either key: one branch.
 */
export function proxy_on_request_headers(id: u32, _headers: u32, _endOfStream: u32): u32 {
  if (!atHeaders) return 0;
  if (excluding > 0 && excludedNow(id)) return 0;
  if (keeping > 0 && ownsSlot(id)) keepRequest(id);
  return 0;
}

// Whether stream `id` left the count at these headers (its path is excluded by its plugin).
function excludedNow(id: u32): bool {
  if (!streamRoots.has(id)) return false;
  const rootId = streamRoots.get(id);
  if (!roots.has(rootId) || uncounted.has(id) || !roots.get(rootId).isExcluded()) return false;
  uncounted.add(id);
  countEnd(false);
  liveEnd(id);
  if (pushing) pushTransition(false);
  return true;
}

/** Deletion: a stream leaves the count exactly once; a root is forgotten. */
export function proxy_on_delete(id: u32): void {
  if (roots.has(id)) {
    const root = roots.get(id);
    roots.delete(id);
    forgetRoot(root, roots.values());
    countHeaderWork();
    return;
  }
  if (streamRoots.size > 0) streamRoots.delete(id);
  if (uncounted.size > 0 && uncounted.has(id)) {
    uncounted.delete(id);
    return;
  }
  countEnd(true);
  liveEnd(id);
  if (pushing) pushTransition(false);
}
