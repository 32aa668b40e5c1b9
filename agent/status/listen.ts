import { serve } from "@hono/node-server";
import type { Hono } from "hono";

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
export function listen(app: Hono, address: string, port: number): Promise<StatusServer> {
  return new Promise((resolve, reject) => {
    const server = serve({ fetch: app.fetch, hostname: address, port }, (info) => {
      resolve({
        port: info.port,
        close: () =>
          new Promise((done) => {
            (server as unknown as { closeAllConnections?: () => void }).closeAllConnections?.();
            server.close(() => done());
          }),
      });
    });
    server.once(
      "error",
      (error: Error) => reject(new Error(`Cannot listen on ${address}:${port}: ${error.message}`)),
    );
  });
}
