// An upstream app that knows how many requests it is serving right now (delay, hold, stream, bytes,
// WebSocket echo).
import { EventEmitter } from "node:events";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { WebSocketServer } from "ws";

// The part of a `ws` server-side socket used here (the package ships no types).
interface EchoSocket {
  on(event: "message", listener: (data: Buffer, binary: boolean) => void): void;
  once(event: "close", listener: () => void): void;
  send(data: Buffer, options: { binary: boolean }): void;
}

/** A running upstream app. */
export interface UpstreamApp {
  /** Port on 127.0.0.1. */
  readonly port: number;
  /** Requests and WebSockets being served now (arrived, not yet finished or closed). */
  readonly inflight: number;
  /** WebSockets open now (part of `inflight`). */
  readonly webSockets: number;
  /** Requests held by `/hold`, waiting for `release`. */
  readonly held: number;
  /** Requests and WebSockets that have finished or closed. */
  readonly completed: number;
  /** Answers up to `count` held requests (all by default), oldest first. */
  release(count?: number): void;
  /** Whether a request for this exact URL (path and query) has arrived. */
  saw(url: string): boolean;
  /** The held requests as they arrived (URL and headers), oldest first. */
  heldRequests(): IncomingMessage[];
  /** Answers the held requests `pick` chooses; returns how many it answered. */
  releaseWhere(pick: (request: IncomingMessage) => boolean): number;
  /** Resolves when `predicate(app)` holds, checked on every change; rejects at the deadline. */
  until(predicate: (app: UpstreamApp) => boolean, timeoutMs?: number): Promise<void>;
  /** Closes the server and every connection. */
  close(): Promise<void>;
}

/**
 * Starts the app on 127.0.0.1 at a free port.
 *
 * @example
 * ```ts
 * const app = await startUpstreamApp();
 * await app.until((a) => a.held === 3);
 * app.release();
 * ```
 */
export async function startUpstreamApp(): Promise<UpstreamApp> {
  const events = new EventEmitter();
  events.setMaxListeners(0);
  const heldResponses: ServerResponse[] = [];
  const seen = new Set<string>();
  let inflight = 0;
  let completed = 0;
  const changed = () => events.emit("change");
  const begin = (): () => void => {
    inflight++;
    let done = false;
    changed();
    return () => {
      if (done) return;
      done = true;
      inflight--;
      completed++;
      changed();
    };
  };

  const server = createServer((request: IncomingMessage, response: ServerResponse) => {
    const end = begin();
    seen.add(request.url ?? "/");
    response.once("close", end);
    request.resume();
    const url = new URL(request.url ?? "/", "http://app");
    const number = (name: string, fallback: number) =>
      Number(url.searchParams.get(name) ?? fallback);
    if (url.pathname === "/delay") {
      const timer = setTimeout(() => response.end("ok"), number("ms", 0));
      response.once("close", () => clearTimeout(timer));
    } else if (url.pathname === "/hold" || url.pathname.startsWith("/hold/")) {
      heldResponses.push(response);
      response.once("close", () => {
        const index = heldResponses.indexOf(response);
        if (index >= 0) heldResponses.splice(index, 1);
        changed();
      });
      changed();
    } else if (url.pathname === "/bytes") {
      const total = number("n", 0);
      response.writeHead(200, {
        "content-type": "application/octet-stream",
        "content-length": String(total),
      });
      const chunk = Buffer.alloc(64 * 1024, 120);
      let left = total;
      const pump = () => {
        while (left > 0) {
          const piece = left >= chunk.length ? chunk : chunk.subarray(0, left);
          left -= piece.length;
          if (!response.write(piece)) return void response.once("drain", pump);
        }
        response.end();
      };
      pump();
    } else if (url.pathname === "/stream") {
      let left = number("chunks", 3);
      response.writeHead(200, { "content-type": "text/plain" });
      const timer = setInterval(() => {
        response.write(`chunk ${left}\n`);
        if (--left <= 0) {
          clearInterval(timer);
          response.end();
        }
      }, number("interval", 10));
      response.once("close", () => clearInterval(timer));
    } else {
      response.end("ok");
    }
  });
  const sockets = new WebSocketServer({ server });
  let webSockets = 0;
  sockets.on("connection", (socket: EchoSocket) => {
    webSockets++;
    socket.once("close", () => {
      webSockets--;
    });
    const end = begin();
    socket.on("message", (data: Buffer, binary: boolean) => socket.send(data, { binary }));
    socket.once("close", end);
  });
  const connections = new Set<import("node:net").Socket>();
  server.on("connection", (socket) => {
    connections.add(socket);
    socket.once("close", () => connections.delete(socket));
  });
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  const port = (server.address() as AddressInfo).port;

  const app: UpstreamApp = {
    port,
    get inflight() {
      return inflight;
    },
    get webSockets() {
      return webSockets;
    },
    get held() {
      return heldResponses.length;
    },
    get completed() {
      return completed;
    },
    release(count = Infinity) {
      for (const response of heldResponses.splice(0, count)) response.end("released");
      changed();
    },
    saw: (url) => seen.has(url),
    heldRequests: () => heldResponses.map((response) => response.req),
    releaseWhere(pick) {
      const picked = heldResponses.filter((response) => pick(response.req));
      for (const response of picked) {
        heldResponses.splice(heldResponses.indexOf(response), 1);
        response.end("released");
      }
      changed();
      return picked.length;
    },
    until(predicate, timeoutMs = 20_000) {
      if (predicate(app)) return Promise.resolve();
      return new Promise((done, fail) => {
        const check = () => {
          if (!predicate(app)) return;
          cleanup();
          done();
        };
        const timer = setTimeout(() => {
          cleanup();
          fail(
            new Error(
              `Upstream app: condition not met within ${timeoutMs} ms (inflight ${inflight}, held ${heldResponses.length}, completed ${completed})`,
            ),
          );
        }, timeoutMs);
        const cleanup = () => {
          clearTimeout(timer);
          events.off("change", check);
        };
        events.on("change", check);
      });
    },
    async close() {
      for (const client of sockets.clients) client.terminate();
      for (const socket of connections) socket.destroy();
      await new Promise<void>((done) => sockets.close(() => done()));
      await new Promise<void>((done) => server.close(() => done()));
    },
  };
  return app;
}
