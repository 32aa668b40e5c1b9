// Loads the xDS proxy (and gRPC) on first use, so an agent with a static config never loads it.
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
