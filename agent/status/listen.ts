import type { Hono } from "hono";

/** How long a closing server lets the answers under way finish before it cuts their connections. */
const CLOSE_GRACE_MS = 500;

/** A listening status server. */
export interface StatusServer {
  /** The port actually bound (useful with port 0). */
  port: number;
  close(): Promise<void>;
}

/**
 * Serves `app` on `address:port`; resolves once listening.
 *
 * @throws when the port cannot be bound, naming the address
 */
export async function listen(app: Hono, address: string, port: number): Promise<StatusServer> {
  // Loaded by the commands that serve: it reads the fetch globals, which cost a start ~25 ms.
  const { serve } = await import("@hono/node-server");
  return new Promise((resolve, reject) => {
    const server = serve({ fetch: app.fetch, hostname: address, port }, (info) => {
      resolve({
        port: info.port,
        close: () =>
          new Promise((done) => {
            // Answers being written (a preStop hook's, as lastcall closes) get a moment to finish.
            const http = server as unknown as Partial<
              Record<"closeAllConnections" | "closeIdleConnections", () => void>
            >;
            const cut = setTimeout(() => http.closeAllConnections?.(), CLOSE_GRACE_MS);
            server.close(() => {
              clearTimeout(cut);
              done();
            });
            http.closeIdleConnections?.();
          }),
      });
    });
    server.once(
      "error",
      (error: Error) => reject(new Error(`Cannot listen on ${address}:${port}: ${error.message}`)),
    );
  });
}
