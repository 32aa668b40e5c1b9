// A proxy-wasm module with the same exports as the lastcall filter (filter/assembly/index.ts) that
// does nothing: Envoy's wasm plumbing alone (a VM per worker, a context and the ABI calls per
// stream), so the benchmark can tell that cost apart from lastcall's own logic.
// Built by build/bench.mjs with the filter's asc options into dist/bench/noop.wasm.

// @ts-ignore: decorator
@global
/** The `abort` named by the build; never reached. */
function abort_proc_exit(message: string | null, fileName: string | null, line: u32, column: u32): void {
  unreachable();
}

/** Allocates memory for the host (plugin configuration). */
export function malloc(size: usize): usize {
  return __alloc(size, 0);
}
export { malloc as proxy_on_memory_allocate };

export function proxy_abi_version_0_2_0(): void {}
export function proxy_on_context_create(id: u32, rootId: u32): void {}
export function proxy_on_vm_start(rootId: u32, vmConfigSize: u32): u32 { return 1; }
export function proxy_on_configure(rootId: u32, size: u32): u32 { return 1; }
export function proxy_on_tick(rootId: u32): void {}
export function proxy_on_http_call_response(rootId: u32, token: u32, headers: u32, bodySize: u32, trailers: u32): void {}
export function proxy_on_request_headers(id: u32, headers: u32, endOfStream: u32): u32 { return 0; }
export function proxy_on_delete(id: u32): void {}
