// An in-process proxy-wasm host (ABI 0.2.x) for unit tests, modelled on Envoy 1.40 and
// proxy-wasm-cpp-host: what it models and why is in docs/testing.md; the parts are in proxy-wasm/.
export {
  FILTER_WASM,
  type HostCallPoint,
  type HostOptions,
  type HttpCall,
  type LogLine,
  type StreamOptions,
  type VmOptions,
  WasmResult,
} from "./proxy-wasm/abi.ts";
export { ProxyWasmHost } from "./proxy-wasm/host.ts";
export { FilterVm } from "./proxy-wasm/vm.ts";
