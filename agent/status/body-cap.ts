// Every body the status server takes is small (a report is about 150 bytes, an app's state
// less), so each is capped: a large one is refused with 413 before it is read (content-length)
// or as soon as it passes the cap (chunked), and never held in memory whole.
import type { MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";

/**
 * Middleware that answers 413 `{"error":"<what> larger than <maxBytes> bytes"}` to a body over
 * `maxBytes`, and hands the (buffered, at most `maxBytes`) body on otherwise.
 *
 * @param options.maxBytes The largest body taken
 * @param options.what What the body is, for the error line. @default "request body"
 * @returns The middleware
 * @example
 * ```ts
 * app.post("/v1/app", bodyCap({ maxBytes: 4096 }), handler);
 * ```
 */
export function bodyCap(options: { maxBytes: number; what?: string }): MiddlewareHandler {
  const error = `${options.what ?? "request body"} larger than ${options.maxBytes} bytes`;
  return bodyLimit({ maxSize: options.maxBytes, onError: (c) => c.json({ error }, 413) });
}
