// Clients of requests the upstream app holds (`/hold?id=N`), each one the test can end from the
// client side: an HTTP/1.1 request on its own connection (abort: the socket is destroyed) or an
// HTTP/2 stream (abort: RST_STREAM with CANCEL).
import type { IncomingMessage } from "node:http";
import { request } from "node:http";
import { type ClientHttp2Session, constants } from "node:http2";
import { type Outcome, outcomeOf } from "../filter/clients.ts";

/** One held request, seen from the client. */
export interface HeldClient {
  /** The id in its path, `/hold?id=<id>`. */
  readonly id: number;
  /** Settles when it ended: a whole response (`reset: false`), or a reset, whoever caused it. */
  readonly outcome: Promise<Outcome>;
  /** Ends it from the client side before its response. */
  abort(): void;
}

/** The id of a held request as the upstream app received it; NaN for another path. */
export function heldId(request: IncomingMessage): number {
  const match = /^\/hold\?id=(\d+)$/.exec(request.url ?? "");
  return match ? Number(match[1]) : Number.NaN;
}

/**
 * GETs `/hold?id=<id>` over HTTP/1.1 on a connection of its own; `abort()` destroys the socket.
 *
 * @example
 * ```ts
 * const held = holdHttp1(port, 7);
 * await app.until((a) => a.held === 1);
 * held.abort();
 * expect(await held.outcome).toMatchObject({ reset: true });
 * ```
 */
export function holdHttp1(port: number, id: number): HeldClient {
  const req = request({ host: "127.0.0.1", port, path: `/hold?id=${id}`, agent: false });
  const outcome = outcomeOf(req);
  req.end();
  return { id, outcome, abort: () => req.destroy() };
}

/**
 * GETs `/hold?id=<id>` as one stream of an HTTP/2 session; `abort()` resets the stream with
 * RST_STREAM(CANCEL).
 *
 * @example
 * ```ts
 * const held = holdHttp2(await h2Session(port), 3);
 * held.abort();
 * ```
 */
export function holdHttp2(session: ClientHttp2Session, id: number): HeldClient {
  const stream = session.request({ ":path": `/hold?id=${id}`, ":method": "GET" });
  const outcome = new Promise<Outcome>((done) => {
    let status: number | undefined;
    let complete = false;
    stream.on("response", (headers) => {
      status = Number(headers[":status"]);
    });
    stream.on("end", () => {
      complete = true;
    });
    stream.on("error", () => {});
    // A stream reset by either side, or whose session is destroyed, ends its readable side too:
    // only a response (headers), its end, and a close with NO_ERROR make a whole response.
    stream.on(
      "close",
      () =>
        done({
          status,
          reset: !complete || status === undefined || stream.rstCode !== constants.NGHTTP2_NO_ERROR,
        }),
    );
    stream.resume();
  });
  return { id, outcome, abort: () => stream.close(constants.NGHTTP2_CANCEL) };
}
