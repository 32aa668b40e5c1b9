// Refuses control requests an Envoy lastcall supervises carries to the status port, by finding
// who holds the client end of the loopback connection (docs/architecture.md).
import type { Context, MiddlewareHandler } from "hono";
import { stat } from "node:fs/promises";
import { readTcpTable, socketInodes, TCP_STATE } from "../envoy/sockets.ts";

/** The two ends of a TCP connection to the status server, as its accepted socket reports them. */
export interface ConnectionPorts {
  /** The caller's port (the socket's remote port). */
  clientPort: number;
  /** The status server's port (the socket's local port). */
  serverPort: number;
}

/** Who made a connection, as far as the kernel can tell. */
export type ConnectionMaker =
  /** An Envoy lastcall supervises: the client socket is one of its fds. */
  | { kind: "envoy"; pid: number }
  /** Some other process (or one that has exited). */
  | { kind: "other" }
  /** /proc is there, but not the client socket of this connection (or an Envoy's fds are unreadable). */
  | { kind: "unknown"; why: string }
  /** No /proc (not Linux): it cannot be told. */
  | { kind: "untold" };

/** Whether process `pid` still exists (its /proc entry is there). */
async function exists(pid: number, proc: string): Promise<boolean> {
  return await stat(`${proc}/${pid}`).then(() => true, () => false);
}

/**
 * Tells which process made the loopback connection `ports`: one of `envoyPids`, another one, or
 * unknown (fail closed), from /proc/net/tcp{,6} and /proc/PID/fd.
 *
 * @param ports The connection, as the server's accepted socket reports it
 * @param envoyPids The live Envoy processes lastcall supervises
 * @param proc Where procfs is mounted (tests point it at a fake tree)
 * @returns Who made it; `untold` when there is no /proc
 * @example
 * ```ts
 * const maker = await connectionMaker({ clientPort: 40312, serverPort: 15020 }, [4211]);
 * if (maker.kind === "envoy") refuse();
 * ```
 */
export async function connectionMaker(
  ports: ConnectionPorts,
  envoyPids: number[],
  proc = "/proc",
): Promise<ConnectionMaker> {
  const table = await readTcpTable(proc);
  if (!table) return { kind: "untold" };
  // Every row with these ports (a TIME_WAIT row has inode 0 and no owner): if any is an Envoy's,
  // the connection is refused.
  const inodes = new Set(
    table.filter((s) =>
      s.localPort === ports.clientPort && s.remotePort === ports.serverPort &&
      s.state !== TCP_STATE.listen && s.inode !== 0
    )
      .map((s) => s.inode),
  );
  if (inodes.size === 0) {
    return {
      kind: "unknown",
      why: `no client socket for port ${ports.clientPort} in ${proc}/net/tcp`,
    };
  }
  for (const pid of envoyPids) {
    const owned = await socketInodes(pid, proc);
    if (!owned) {
      if (await exists(pid, proc)) {
        return { kind: "unknown", why: `cannot read the sockets of Envoy pid ${pid}` };
      }
      continue; // exited: it holds nothing
    }
    for (const inode of inodes) if (owned.has(inode)) return { kind: "envoy", pid };
  }
  return { kind: "other" };
}

/** The ports of the connection the request came on; undefined without a socket (`app.request()`). */
export function connectionPorts(c: Context): ConnectionPorts | undefined {
  const socket =
    (c.env as { incoming?: { socket?: { remotePort?: unknown; localPort?: unknown } } } | undefined)
      ?.incoming?.socket;
  const clientPort = socket?.remotePort;
  const serverPort = socket?.localPort;
  if (typeof clientPort !== "number" || typeof serverPort !== "number") return undefined;
  return { clientPort, serverPort };
}

/**
 * Middleware that answers 403 (one JSON error naming the route and why) to a request whose
 * connection an Envoy lastcall supervises made, or whose maker cannot be found while /proc is
 * there, or that came on no socket at all. Without /proc (not Linux) it lets the request through:
 * the loopback rule before it is then the only guard.
 *
 * @param maker Tells who made a connection (the agent passes {@linkcode connectionMaker} with its live Envoys)
 * @returns The middleware
 * @example
 * ```ts
 * app.post("/drain", loopbackOnly(), notThroughEnvoy((p) => connectionMaker(p, envoyPids())), handler);
 * ```
 */
export function notThroughEnvoy(
  maker: (ports: ConnectionPorts) => Promise<ConnectionMaker>,
): MiddlewareHandler {
  return async function notThroughEnvoy(c, next) {
    const route = `${c.req.method} ${c.req.path}`;
    const ports = connectionPorts(c);
    if (!ports) {
      return c.json({ error: `${route} is refused: no socket tells who is calling` }, 403);
    }
    const who = await maker(ports);
    if (who.kind === "envoy") {
      return c.json({
        error:
          `${route} is not accepted through Envoy: the connection comes from Envoy pid ${who.pid}`,
      }, 403);
    }
    if (who.kind === "unknown") {
      return c.json({ error: `${route} is refused: cannot tell who is calling (${who.why})` }, 403);
    }
    await next();
  };
}
