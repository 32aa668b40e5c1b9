// Measurement only (filter-load): the lastcall filter without `proxy_on_request_headers`, so the
// benchmark can tell whether a second build for configurations without `exclude_paths` is worth
// it (Envoy does not enter the VM for a callback the module does not export). Every other export
// is the filter's own; `exclude_paths` does nothing in this build. Never shipped.
// Built by build/bench.mjs with the filter's asc options into dist/bench/filter-no-request-headers.wasm.
export {
  malloc, proxy_on_memory_allocate, proxy_abi_version_0_2_0, proxy_on_context_create, proxy_on_vm_start,
  proxy_on_configure, proxy_on_tick, proxy_on_http_call_response, proxy_on_delete,
} from "../../filter/assembly/index";
