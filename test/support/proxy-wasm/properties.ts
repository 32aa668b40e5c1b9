// The properties a VM reads with proxy_get_property, serialised as Envoy 1.40's CEL attributes
// are (docs/testing.md says which are modelled and when request headers are readable).
import type { StreamState } from "./abi.ts";

/** What a property lookup needs to know about the VM and the context it acts for. */
export interface PropertyScope {
  /** The plugin's `root_id` and `vm_id`. */
  readonly rootId: string;
  readonly vmId: string;
  /** The stream the lookup acts for; undefined for the root context. */
  readonly stream: StreamState | undefined;
  /** Whether the stream's request headers may be read now. */
  readonly headersReadable: boolean;
}

/**
 * A property's value, as Envoy serialises it; undefined where Envoy answers NotFound.
 *
 * @throws {Error} for a property the host does not model
 */
export function propertyValue(path: string, scope: PropertyScope): Uint8Array | undefined {
  const { stream } = scope;
  const header = (
    name: string,
  ) => (scope.headersReadable ? stream?.requestHeaders?.find(([k]) => k === name)?.[1] : undefined);
  switch (path) {
    case "plugin_root_id":
      return Buffer.from(scope.rootId);
    case "plugin_name":
      return Buffer.from("lastcall");
    case "plugin_vm_id":
      return Buffer.from(scope.vmId);
    case "request.time": {
      if (!stream?.http) return undefined;
      const bytes = Buffer.alloc(8);
      bytes.writeBigInt64LE(stream.startNs);
      return bytes;
    }
    case "request.method": {
      const method = header(":method");
      return method === undefined ? undefined : Buffer.from(method);
    }
    case "request.url_path": {
      const path = header(":path");
      return path === undefined ? undefined : Buffer.from(path.split("?")[0]!, "latin1");
    }
    case "destination.address":
      return stream === undefined ? undefined : Buffer.from(stream.address);
    case "request.protocol":
      return stream?.http ? Buffer.from(stream.protocol) : undefined;
    case "xds.cluster_name":
      return stream === undefined ? undefined : Buffer.from(stream.cluster);
    case "xds.route_name":
      return stream === undefined ? undefined : Buffer.from(stream.route);
    default:
      throw new Error(`proxy-wasm host: property ${path} is not modelled`);
  }
}
