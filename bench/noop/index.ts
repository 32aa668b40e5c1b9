// A proxy-wasm module with the filter's exports that does nothing: Envoy's wasm plumbing alone, for
// the benchmarks.

// @ts-ignore: decorator
@global
/** The `abort` named by the build; never reached. */
// deno-lint-ignore no-unused-vars -- used: @global makes it the `abort` the build names
function abort_proc_exit(_message: string | null, _fileName: string | null, _line: u32, _column: u32): void {
  unreachable();
}

/** Allocates memory for the host (plugin configuration). */
export function malloc(size: usize): usize {
  return __alloc(size, 0);
}
export { malloc as proxy_on_memory_allocate };

export function proxy_abi_version_0_2_0(): void {}
export function proxy_on_context_create(_id: u32, _rootId: u32): void {}
export function proxy_on_vm_start(_rootId: u32, _vmConfigSize: u32): u32 { return 1; }
export function proxy_on_configure(_rootId: u32, _size: u32): u32 { return 1; }
export function proxy_on_tick(_rootId: u32): void {}
export function proxy_on_http_call_response(_rootId: u32, _token: u32, _headers: u32, _bodySize: u32, _trailers: u32): void {}
export function proxy_on_request_headers(_id: u32, _headers: u32, _endOfStream: u32): u32 { return 0; }
export function proxy_on_delete(_id: u32): void {}
