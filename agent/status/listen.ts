// Serves a Hono app on node:http. The port can be bound before the app exists (a probe that comes
// early waits instead of being refused); Hono's Node adapter, whose load reads the fetch globals
// (Node then loads undici: ~0.1 s of CPU), loads on the first request or, held, once warmed: a
// start binds its port and spawns Envoy before paying for it. Warmed, it asks itself one request,
// so a kubelet's first probe finds the request path compiled.
import {
  createServer,
  get,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from "node:http";
import type { AddressInfo } from "node:net";
import type { Hono } from "hono";

/** How long a closing server lets the answers under way finish before it cuts their connections. */
const CLOSE_GRACE_MS = 500;

/** What a warmed server asks itself once: its first probe then finds the request path compiled. */
const WARM_PATH = "/healthz/live";

/** A listening status server. */
export interface StatusServer {
  /** The port actually bound (useful with port 0). */
  port: number;
  close(): Promise<void>;
}

type Handler = (incoming: IncomingMessage, outgoing: ServerResponse) => unknown;

/** Answers some requests on node:http itself (true: it answers), before the app sees them. */
export type Front = (incoming: IncomingMessage, outgoing: ServerResponse) => boolean;

/** A port bound before its app: requests wait for {@linkcode BoundServer.serve}. */
export interface BoundServer extends StatusServer {
  /** Gives the app that answers, and what answers before it (once); held, requests still wait for `warm()`. */
  serve(app: Hono, front?: Front): void;
  /**
   * Loads what answers requests and asks itself one (once; never rejects): held requests are
   * answered then, and the first probe after finds its path compiled.
   */
  warm(): Promise<void>;
}

/** Options of {@linkcode bindStatus}. */
export interface BindOptions {
  /** Requests wait until {@linkcode BoundServer.warm} is called. @default false */
  held?: boolean;
}

/**
 * Binds `address:port` now; requests are answered once the app is given (and, held, once warmed).
 *
 * @example
 * ```ts
 * const server = await bindStatus("127.0.0.1", 15020, { held: true });
 * server.serve(new Hono().get("/", (c) => c.text("ok")));
 * void server.warm();
 * ```
 * @throws when the port cannot be bound, naming the address
 */
export function bindStatus(
  address: string,
  port: number,
  { held = false }: BindOptions = {},
): Promise<BoundServer> {
  let give: (served: { app: Hono; front?: Front }) => void = () => {};
  const given = new Promise<{ app: Hono; front?: Front }>((resolve) => give = resolve);
  let handler: Promise<Handler> | undefined;
  const load = () =>
    handler ??= given.then(({ app, front }) =>
      import("@hono/node-server").then(({ getRequestListener }) => {
        const answer = getRequestListener(app.fetch, { hostname: address });
        return front ? (i, o) => front(i, o) || answer(i, o) : answer;
      })
    );
  let warm = () => {};
  let warming: Promise<void> | undefined;
  const warmed = held ? new Promise<void>((resolve) => warm = resolve) : Promise.resolve();
  // Held and closed before it was warmed (stopped before Envoy's spawn): held requests are told.
  let stop: (answer: Handler) => void = () => {};
  const stopped = new Promise<Handler>((resolve) => {
    if (held) stop = resolve;
  });
  const server = createServer((incoming, outgoing) => {
    const answering = Promise.race([warmed.then(load), stopped]);
    answering.then((answer) => answer(incoming, outgoing)).catch((error: Error) => {
      outgoing.statusCode = 500;
      outgoing.end(`status server: ${error.message}\n`);
    });
  });
  return new Promise((resolve, reject) => {
    server.once(
      "error",
      (error: Error) => reject(new Error(`Cannot listen on ${address}:${port}: ${error.message}`)),
    );
    server.listen(port, address, () => {
      const bound = server.address();
      resolve({
        port: typeof bound === "object" && bound !== null ? bound.port : port,
        serve: (app, front) => give({ app, front }),
        warm: () => {
          warm();
          // A failed load answers each request; a failed warm-up request only costs its time.
          return warming ??= load().then(() => askOnce(server, WARM_PATH)).then(() => {}, () => {});
        },
        close: () =>
          new Promise((done) => {
            if (warming === undefined) stop(stopping);
            const cut = setTimeout(() => server.closeAllConnections(), CLOSE_GRACE_MS);
            server.close(() => {
              clearTimeout(cut);
              done();
            });
            server.closeIdleConnections();
          }),
      });
    });
  });
}

/**
 * The answer to a request held by a server that closes before it was warmed; its connection
 * closes with it (kept alive, the close would wait out its grace).
 */
const stopping: Handler = (_incoming, outgoing) => {
  outgoing.writeHead(503, { "content-type": "application/json", connection: "close" });
  outgoing.end(JSON.stringify({ ready: false, reason: "lastcall is stopping" }));
};

/** One GET to the server's own port, over loopback; resolves once answered. */
async function askOnce(server: Server, path: string): Promise<void> {
  const bound = server.address() as AddressInfo;
  // Loaded here: the port is bound before anything else loads (commands/run.ts).
  const { statusTarget } = await import("../envoy/status-target.ts");
  const host = await statusTarget(bound.address); // an IP: a wildcard becomes loopback
  return await new Promise((resolve, reject) => {
    get({ host, port: bound.port, path, agent: false }, (answer) => {
      answer.resume().on("end", resolve).on("error", reject);
    }).on("error", reject);
  });
}

/**
 * Serves `app` on `address:port`, `front` answering first where it will; resolves once
 * listening. The first request loads the adapter.
 *
 * @example
 * ```ts
 * const server = await listen(new Hono().get("/", (c) => c.text("ok")), "127.0.0.1", 0);
 * await server.close();
 * ```
 * @throws when the port cannot be bound, naming the address
 */
export async function listen(
  app: Hono,
  address: string,
  port: number,
  front?: Front,
): Promise<StatusServer> {
  const server = await bindStatus(address, port);
  server.serve(app, front);
  return server;
}
