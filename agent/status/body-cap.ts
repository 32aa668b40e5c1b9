// Every body the status server takes is small (a report is about 150 bytes, an app's state
// less), so each is capped: a large one is refused with 413 before it is read (content-length)
// or as soon as it passes the cap (chunked), and never held in memory whole. On node:http the
// body is read from Node's own request: Hono's adapter would build a web Request for it.
import type { Context, MiddlewareHandler } from "hono";
import type { IncomingMessage } from "node:http";
import { Readable } from "node:stream";

/** Decodes the bodies (one decoder for every request). */
const utf8 = new TextDecoder();

/** The bodies read by {@linkcode bodyCap}, by request. */
const bodies = new WeakMap<Context, Uint8Array>();

/**
 * Middleware that answers 413 `{"error":"<what> larger than <maxBytes> bytes"}` to a body over
 * `maxBytes`, and otherwise reads the body (at most `maxBytes`) for {@linkcode cappedJson}.
 *
 * @param options.maxBytes The largest body taken
 * @param options.what What the body is, for the error line. @default "request body"
 * @returns The middleware
 * @example
 * ```ts
 * app.post("/v1/app", bodyCap({ maxBytes: 4096 }), (c) => c.json(cappedJson(c)));
 * ```
 */
export function bodyCap(options: { maxBytes: number; what?: string }): MiddlewareHandler {
  const { maxBytes } = options;
  const error = `${options.what ?? "request body"} larger than ${maxBytes} bytes`;
  return async function bodyCap(c, next) {
    if (c.req.method === "GET" || c.req.method === "HEAD") return await next();
    const body = await cappedBody(c, maxBytes);
    if (body === undefined) return c.json({ error }, 413);
    bodies.set(c, body);
    await next();
  };
}

/**
 * The body {@linkcode bodyCap} read, parsed as JSON; undefined when it is not JSON.
 *
 * @example
 * ```ts
 * const state = cappedJson(c); // POST /v1/app's {"state":"running"}
 * ```
 */
export function cappedJson(c: Context): unknown {
  try {
    return JSON.parse(utf8.decode(bodies.get(c) ?? new Uint8Array()));
  } catch {
    return undefined;
  }
}

/**
 * The body of `c`, read from Node's request when served on node:http (else from the web one);
 * undefined once it passes `maxBytes`, and nothing more is read.
 *
 * @example
 * ```ts
 * const bytes = await cappedBody(c, 16_384);
 * ```
 */
export function cappedBody(c: Context, maxBytes: number): Promise<Uint8Array | undefined> {
  const incoming = (c.env as { incoming?: unknown } | undefined)?.incoming;
  if (incoming instanceof Readable) return readCapped(incoming as IncomingMessage, maxBytes);
  if (Number(c.req.header("content-length")) > maxBytes) return Promise.resolve(undefined);
  return readWeb(c.req.raw.body, maxBytes);
}

/**
 * Reads a node request's body; undefined once it passes `maxBytes`, and nothing more is read.
 *
 * @example
 * ```ts
 * const bytes = await readCapped(incoming, 4096);
 * ```
 */
export function readCapped(
  incoming: IncomingMessage,
  maxBytes: number,
): Promise<Uint8Array | undefined> {
  if (Number(incoming.headers["content-length"]) > maxBytes) return Promise.resolve(undefined);
  return new Promise((resolve, reject) => {
    const chunks: Uint8Array[] = [];
    let size = 0;
    const settle = (body: Uint8Array | undefined, error?: Error) => {
      incoming.off("data", onData).off("end", onEnd).off("error", onError).off("close", onClose);
      incoming.pause(); // what is left is the server's to discard once it has answered
      error ? reject(error) : resolve(body);
    };
    const onData = (chunk: Uint8Array) => {
      size += chunk.byteLength;
      if (size > maxBytes) return settle(undefined);
      chunks.push(chunk);
    };
    const onEnd = () => settle(Buffer.concat(chunks));
    const onError = (error: Error) => settle(undefined, error);
    const onClose = () => settle(undefined, new Error("the caller closed before its body ended"));
    incoming.on("data", onData).once("end", onEnd).once("error", onError).once("close", onClose);
  });
}

/** Reads a web body; undefined (and the stream cancelled) once it passes `maxBytes`. */
async function readWeb(
  body: ReadableStream<Uint8Array> | null,
  maxBytes: number,
): Promise<Uint8Array | undefined> {
  if (!body) return new Uint8Array();
  const chunks: Uint8Array[] = [];
  let size = 0;
  const reader = body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return Buffer.concat(chunks);
    size += value.byteLength;
    if (size > maxBytes) {
      await reader.cancel();
      return undefined;
    }
    chunks.push(value);
  }
}
