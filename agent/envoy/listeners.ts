// The names of an Envoy's listeners by the port they listen on, from its admin
// (`GET /listeners?format=json`): fetched apart from parsed, as Contour's shutdown-manager does.

/** Listener names by port (a port with two listeners, on two addresses, keeps both names). */
export type ListenerNames = Map<number, string>;

interface SocketAddress {
  socket_address?: { port_value?: unknown };
}

/**
 * Parses the admin's `/listeners?format=json` answer; anything unexpected is skipped.
 *
 * @example
 * ```ts
 * parseListenerNames('{"listener_statuses":[{"name":"inbound","local_address":{"socket_address":{"address":"0.0.0.0","port_value":15006}}}]}');
 * // Map { 15006 => "inbound" }
 * ```
 */
export function parseListenerNames(text: string): ListenerNames {
  const names: ListenerNames = new Map();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return names;
  }
  const statuses = (body as { listener_statuses?: unknown })?.listener_statuses;
  if (!Array.isArray(statuses)) return names;
  for (
    const status of statuses as Array<
      {
        name?: unknown;
        local_address?: SocketAddress;
        additional_local_addresses?: SocketAddress[];
      }
    >
  ) {
    if (typeof status?.name !== "string") continue;
    const addresses = [
      status.local_address,
      ...(Array.isArray(status.additional_local_addresses)
        ? status.additional_local_addresses
        : []),
    ];
    for (const address of addresses) {
      const port = address?.socket_address?.port_value;
      if (typeof port !== "number" || !Number.isInteger(port)) continue;
      const known = names.get(port);
      names.set(port, known && known !== status.name ? `${known}|${status.name}` : status.name);
    }
  }
  return names;
}

/**
 * The listener of an `ip:port` (or `[ip]:port`) address, by its port; undefined when unknown.
 *
 * @example
 * ```ts
 * listenerAt(new Map([[15006, "inbound"]]), "10.0.0.7:15006"); // "inbound"
 * ```
 */
export function listenerAt(names: ListenerNames, address: string): string | undefined {
  const port = Number(address.slice(address.lastIndexOf(":") + 1));
  return Number.isInteger(port) ? names.get(port) : undefined;
}
