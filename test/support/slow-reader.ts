// A client on a poor link: it reads a response at a fixed rate (a phone at 3 MB/s), so the
// end of a large body sits in Envoy's and the kernel's buffers long after Envoy has finished the
// stream. It counts the body bytes it really got.
import { connect } from "node:net";
import { type ClientHttp2Stream, connect as connectH2 } from "node:http2";

/** What a slow reader got. */
export interface SlowRead {
  status: number;
  /** Content-length the response announced. */
  expected: number;
  /** Body bytes received. */
  received: number;
  /** How the connection ended: the server's FIN, or a reset. */
  endedBy: "fin" | "reset";
}

/** A download in progress. */
export interface SlowDownload {
  /** Resolves once `bytes` body bytes have arrived. */
  reached(bytes: number): Promise<void>;
  /** Body bytes received so far. */
  received(): number;
  done: Promise<SlowRead>;
}

/**
 * GETs `path` from 127.0.0.1:`port` (or a unix socket at `{ path }`) over HTTP/1.1
 * (`Connection: close`) and reads the answer at `bytesPerSecond`.
 *
 * @example
 * ```ts
 * const download = slowDownload(port, "/bytes?n=30000000", 3_000_000);
 * await download.reached(3_000_000);
 * ```
 */
export function slowDownload(
  target: number | { path: string },
  path: string,
  bytesPerSecond: number,
): SlowDownload {
  const socket = connect(typeof target === "number" ? { host: "127.0.0.1", port: target } : target);
  socket.setNoDelay(true);
  const startedAt = Date.now();
  let head = Buffer.alloc(0);
  let headerDone = false;
  let status = 0;
  let expected = -1;
  let received = 0;
  let total = 0;
  const progress = byteProgress(() => received);
  socket.write(`GET ${path} HTTP/1.1\r\nhost: slow\r\nconnection: close\r\n\r\n`);
  socket.on("data", (chunk: Buffer) => {
    total += chunk.length;
    if (!headerDone) {
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf("\r\n\r\n");
      if (end < 0) return;
      const text = head.subarray(0, end).toString("latin1");
      status = Number(/^HTTP\/1\.1 (\d+)/.exec(text)?.[1] ?? 0);
      expected = Number(/\r\ncontent-length: *(\d+)/i.exec(text)?.[1] ?? -1);
      received = head.length - end - 4;
      headerDone = true;
    } else {
      received += chunk.length;
    }
    progress.notify();
    // Hold back until the rate allows what was read so far (the kernel's window then closes).
    const aheadMs = (total / bytesPerSecond) * 1000 - (Date.now() - startedAt);
    if (aheadMs > 5) {
      socket.pause();
      setTimeout(() => socket.resume(), aheadMs);
    }
  });
  let endedBy: SlowRead["endedBy"] = "fin";
  socket.on("error", () => (endedBy = "reset"));
  const done = new Promise<SlowRead>((resolve) =>
    socket.once("close", () => resolve({ status, expected, received, endedBy }))
  );
  return {
    received: () => received,
    reached: progress.reached,
    done,
  };
}

/** What a slow HTTP/2 reader got. */
export interface SlowStreamRead {
  status: number;
  /** Content-length the response announced (-1 when it announced none). */
  expected: number;
  received: number;
  /** END_STREAM came (the response is whole), or the stream closed without it. */
  endedBy: "end_stream" | "closed";
  /** Trailers, when the response had some (gRPC's `grpc-status`). */
  trailers?: Record<string, string | string[] | undefined>;
}

/** Options of {@linkcode slowH2Download}. */
export interface SlowStreamOptions {
  /** Request headers besides `:path` (a gRPC call's method and content type). */
  headers?: Record<string, string>;
  /** The stream's initial receive window (SETTINGS_INITIAL_WINDOW_SIZE). @default 16384 */
  windowSize?: number;
  /** The request's body (a gRPC call's message), sent whole with END_STREAM. */
  body?: Buffer;
  /** Keep the connection open (idle) after the stream, until `close()`. @default false */
  keepOpen?: boolean;
}

/** An HTTP/2 download in progress. */
export interface SlowStream {
  reached(bytes: number): Promise<void>;
  received(): number;
  done: Promise<SlowStreamRead>;
  /** Closes the connection (one kept open). */
  close(): void;
}

/**
 * GETs `path` from 127.0.0.1:`port` over HTTP/2 (h2c) with a small receive window and reads the
 * body at `bytesPerSecond`, throttling by flow control: Node sends WINDOW_UPDATE only for what
 * the paused stream has handed to the app, so the rest waits in the server's HTTP/2 codec.
 *
 * @example
 * ```ts
 * const download = slowH2Download(port, "/bytes?n=30000000", 3_000_000);
 * await download.reached(3_000_000);
 * ```
 */
export function slowH2Download(
  port: number,
  path: string,
  bytesPerSecond: number,
  options: SlowStreamOptions = {},
): SlowStream {
  const { headers = {}, windowSize = 16_384, body, keepOpen = false } = options;
  const session = connectH2(`http://127.0.0.1:${port}`, {
    settings: { initialWindowSize: windowSize },
  });
  session.on("error", () => {});
  const stream: ClientHttp2Stream = session.request({ ":path": path, ...headers }, {
    endStream: body === undefined,
  });
  if (body !== undefined) stream.end(body);
  const startedAt = Date.now();
  let status = 0;
  let expected = -1;
  let received = 0;
  let ended = false;
  let trailers: SlowStreamRead["trailers"];
  const progress = byteProgress(() => received);
  stream.on("response", (h) => {
    status = Number(h[":status"]);
    expected = Number(h["content-length"] ?? -1);
  });
  stream.on("trailers", (t) => (trailers = t));
  stream.on("data", (chunk: Buffer) => {
    received += chunk.length;
    progress.notify();
    const aheadMs = (received / bytesPerSecond) * 1000 - (Date.now() - startedAt);
    if (aheadMs > 5) {
      stream.pause();
      setTimeout(() => stream.resume(), aheadMs);
    }
  });
  stream.on("end", () => (ended = true));
  stream.on("error", () => {});
  const done = new Promise<SlowStreamRead>((resolve) =>
    stream.once("close", () => {
      if (!keepOpen) session.close();
      resolve({
        status,
        expected,
        received,
        endedBy: ended ? "end_stream" : "closed",
        ...(trailers ? { trailers } : {}),
      });
    })
  );
  return {
    received: () => received,
    reached: progress.reached,
    done,
    close: () => session.close(),
  };
}

/** Promises of byte counts reached: `notify` after each read settles the ones `received()` passed. */
function byteProgress(received: () => number) {
  const waiters: Array<{ bytes: number; resolve: () => void }> = [];
  const notify = () => {
    for (const w of [...waiters]) {
      if (received() >= w.bytes) waiters.splice(waiters.indexOf(w), 1), w.resolve();
    }
  };
  const reached = (bytes: number) =>
    new Promise<void>((resolve) => {
      waiters.push({ bytes, resolve });
      notify();
    });
  return { notify, reached };
}
