// Where Envoy's `lastcall_agent` cluster sends the filter's reports: the status server's
// address as an IP Envoy accepts. A STATIC cluster takes IP addresses only, so a host name
// (`--status-address localhost`) is resolved at start, and a wildcard bind becomes loopback.
import { lookup } from "node:dns/promises";
import { isIP } from "node:net";
import { StartError } from "../lib/errors.ts";

/** Wildcard binds and the loopback address of their family. */
const WILDCARD_TO_LOOPBACK: Record<string, string> = {
  "0.0.0.0": "127.0.0.1",
  "::": "::1",
  "[::]": "::1",
};

/**
 * The IP Envoy reaches the status server at, for `--status-address`.
 *
 * @example
 * ```ts
 * await statusTarget("0.0.0.0"); // "127.0.0.1"
 * await statusTarget("::"); // "::1"
 * await statusTarget("localhost"); // "127.0.0.1" (or "::1", as the resolver answers first)
 * ```
 * @throws {StartError} naming the address when the name does not resolve
 */
export async function statusTarget(address: string): Promise<string> {
  const loopback = WILDCARD_TO_LOOPBACK[address];
  if (loopback) return loopback;
  const bare = address.replace(/^\[(.*)\]$/, "$1");
  if (isIP(bare)) return bare;
  try {
    // The first answer: the one Node's listen() binds to for the same name.
    return (await lookup(bare)).address;
  } catch (error) {
    throw new StartError(
      `Cannot resolve --status-address ${address}: ${
        (error as { code?: string }).code ?? (error as Error).message
      }`,
    );
  }
}
