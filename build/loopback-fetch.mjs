// `fetch` for the Node builds of the agent: node:http for plain HTTP on loopback, the real fetch
// for anything else.
import { request } from "node:http";

/** The part of a fetch Response the agent reads; the body is read whole before it resolves. */
class LoopbackResponse {
  /** @param {number} status @param {Record<string, string | string[] | undefined>} headers @param {Buffer} body */
  constructor(status, headers, body) {
    this.status = status;
    this.ok = status >= 200 && status < 300;
    this.headers = {
      get: (name) => {
        const v = headers[name.toLowerCase()];
        return v === undefined ? null : Array.isArray(v) ? v.join(", ") : v;
      },
    };
    this.body = body;
  }
  text() {
    return Promise.resolve(this.body.toString("utf8"));
  }
  // deno-lint-ignore require-await -- as Response.json(): bad JSON rejects, it does not throw
  async json() {
    return JSON.parse(this.body.toString("utf8"));
  }
  arrayBuffer() {
    return Promise.resolve(
      this.body.buffer.slice(this.body.byteOffset, this.body.byteOffset + this.body.byteLength),
    );
  }
}

/**
 * fetch for `http:` URLs: method, headers, string body and AbortSignal honoured; rejects with the
 * signal's reason when aborted, else with TypeError("fetch failed") whose `cause` is the socket
 * error, as fetch does.
 */
export function fetch(input, init = {}) {
  const url = new URL(typeof input === "string" || input instanceof URL ? input : input.url);
  if (
    url.protocol !== "http:" || typeof input === "object" && !(input instanceof URL) ||
    (init.body !== undefined && typeof init.body !== "string")
  ) {
    return globalThis.fetch(input, init);
  }
  const signal = init.signal;
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const headers = init.headers instanceof Object && !Array.isArray(init.headers) &&
        typeof init.headers.entries !== "function"
      ? init.headers
      : Object.fromEntries(init.headers ?? []);
    const req = request(url, { method: init.method ?? "GET", headers, agent: false }, (res) => {
      const chunks = [];
      res.on("data", (chunk) => chunks.push(chunk));
      res.on("end", () => {
        done();
        resolve(new LoopbackResponse(res.statusCode ?? 0, res.headers, Buffer.concat(chunks)));
      });
      res.on("error", fail);
    });
    const onAbort = () => req.destroy(signal.reason);
    function done() {
      signal?.removeEventListener("abort", onAbort);
    }
    function fail(error) {
      done();
      reject(signal?.aborted ? signal.reason : new TypeError("fetch failed", { cause: error }));
    }
    signal?.addEventListener("abort", onAbort, { once: true });
    req.on("error", fail);
    req.end(init.body);
  });
}
