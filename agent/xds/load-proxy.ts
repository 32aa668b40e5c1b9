// Loads the xDS proxy on first use. It carries gRPC, a megabyte of code that an agent with a
// static config never runs: the Node builds keep it out of the agent's bundle (as the separate
// dist/xds-proxy.cjs, embedded in the single executable; build/bundle.mjs replaces this module),
// so it costs memory only where listeners come from a control plane.
import type * as XdsProxyModule from "./proxy.ts";

/**
 * The xDS proxy module.
 *
 * @example
 * ```ts
 * const { startXdsProxy } = await loadXdsProxy();
 * ```
 */
export async function loadXdsProxy(): Promise<typeof XdsProxyModule> {
  return await import("./proxy.ts");
}
