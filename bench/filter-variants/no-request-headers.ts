// Measurement only: the filter without `proxy_on_request_headers`, to tell what a second build
// would save. Never shipped.
export {
  malloc, proxy_on_memory_allocate, proxy_abi_version_0_2_0, proxy_on_context_create, proxy_on_vm_start,
  proxy_on_configure, proxy_on_tick, proxy_on_http_call_response, proxy_on_delete,
} from "../../filter/assembly/index";
