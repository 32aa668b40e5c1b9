// Downstream clients for the real-Envoy tests: HTTP/1.1, HTTP/2 prior knowledge, WebSocket.
import { type ClientRequest, request } from "node:http";
import { type ClientHttp2Session, connect, constants } from "node:http2";
import WebSocket from "ws";

/** How one request ended on the client side. */
export interface Outcome {
  /** Response status, if a response arrived. */
  status?: number;
  /** Whether the client reset it on purpose. */
  reset: boolean;
}

/** GETs `path` over HTTP/1.1 (one connection per request); resets it after `resetAfterMs` if given. */
export function http1(port: number, path: string, resetAfterMs?: number): Promise<Outcome> {
  const req = request({ host: "127.0.0.1", port, path, agent: false });
  const timer = resetAfterMs === undefined
    ? undefined
    : setTimeout(() => req.destroy(), resetAfterMs);
  const outcome = outcomeOf(req).finally(() => clearTimeout(timer));
  req.end();
  return outcome;
}

/**
 * How one HTTP/1.1 request ends: its status, and whether its response was cut (reset before it,
 * or mid-body). The body is read and dropped.
 *
 * @example
 * ```ts
 * const req = request({ host: "127.0.0.1", port, path: "/" });
 * const outcome = outcomeOf(req); // { status: 200, reset: false }
 * req.end();
 * ```
 */
export function outcomeOf(req: ClientRequest): Promise<Outcome> {
  return new Promise((done) => {
    let status: number | undefined;
    let complete = false;
    req.on("response", (response) => {
      status = response.statusCode;
      response.on("end", () => {
        complete = true;
      });
      response.on("error", () => {});
      response.resume();
    });
    req.on("error", () => {});
    // 'close' comes last whatever happened: a whole response, a reset before it, or one mid-body.
    req.on("close", () => done({ status, reset: !complete }));
  });
}

/** Opens an HTTP/2 cleartext session with prior knowledge. */
export function h2Session(port: number): Promise<ClientHttp2Session> {
  return new Promise((done, fail) => {
    const session = connect(`http://127.0.0.1:${port}`);
    session.once("connect", () => done(session));
    session.once("error", fail);
  });
}

/** GETs `path` on an HTTP/2 session; cancels the stream after `resetAfterMs` if given. */
export function http2(
  session: ClientHttp2Session,
  path: string,
  resetAfterMs?: number,
): Promise<Outcome> {
  return new Promise((done) => {
    const stream = session.request({ ":path": path, ":method": "GET" });
    let status: number | undefined;
    let timer: NodeJS.Timeout | undefined;
    stream.on("response", (headers) => {
      status = Number(headers[":status"]);
    });
    stream.resume();
    stream.on("end", () => {
      clearTimeout(timer);
      done({ status, reset: false });
    });
    stream.on("close", () => {
      clearTimeout(timer);
      done({ status, reset: status === undefined });
    });
    stream.on("error", () => {});
    if (resetAfterMs !== undefined) {
      timer = setTimeout(() => stream.close(constants.NGHTTP2_CANCEL), resetAfterMs);
    }
  });
}

/** Opens a WebSocket and checks one echo round trip. */
export async function openWebSocket(port: number): Promise<WebSocket> {
  const socket = new WebSocket(`ws://127.0.0.1:${port}/ws`);
  await new Promise<void>((done, fail) => {
    socket.once("open", () => done());
    socket.once("error", fail);
  });
  const echoed = new Promise<string>((done) =>
    socket.once("message", (data: Buffer) => done(String(data)))
  );
  socket.send("ping");
  if ((await echoed) !== "ping") throw new Error("WebSocket echo failed");
  return socket;
}

/** Closes a WebSocket and waits for the close handshake. */
export function closeWebSocket(socket: WebSocket): Promise<void> {
  return new Promise((done) => {
    socket.once("close", () => done());
    socket.close();
  });
}
