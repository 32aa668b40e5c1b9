// A client on a poor link: it reads a response at a fixed rate (a phone at 3 MB/s), so the
// end of a large body sits in Envoy's and the kernel's buffers long after Envoy has finished the
// stream. It counts the body bytes it really got.
import { connect } from "node:net";

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
 * GETs `path` from 127.0.0.1:`port` over HTTP/1.1 (`Connection: close`) and reads the answer at
 * `bytesPerSecond`.
 *
 * @example
 * ```ts
 * const download = slowDownload(port, "/bytes?n=30000000", 3_000_000);
 * await download.reached(3_000_000);
 * ```
 */
export function slowDownload(port: number, path: string, bytesPerSecond: number): SlowDownload {
  const socket = connect({ host: "127.0.0.1", port });
  socket.setNoDelay(true);
  const startedAt = Date.now();
  let head = Buffer.alloc(0);
  let headerDone = false;
  let status = 0;
  let expected = -1;
  let received = 0;
  let total = 0;
  const waiters: Array<{ bytes: number; resolve: () => void }> = [];
  const notify = () => {
    for (const w of [...waiters]) if (received >= w.bytes) waiters.splice(waiters.indexOf(w), 1), w.resolve();
  };
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
    notify();
    // Hold back until the rate allows what was read so far (the kernel's window then closes).
    const aheadMs = (total / bytesPerSecond) * 1000 - (Date.now() - startedAt);
    if (aheadMs > 5) {
      socket.pause();
      setTimeout(() => socket.resume(), aheadMs);
    }
  });
  let endedBy: SlowRead["endedBy"] = "fin";
  socket.on("error", () => (endedBy = "reset"));
  const done = new Promise<SlowRead>((resolve) => socket.once("close", () => resolve({ status, expected, received, endedBy })));
  return {
    received: () => received,
    reached: (bytes) => new Promise<void>((resolve) => {
      waiters.push({ bytes, resolve });
      notify();
    }),
    done,
  };
}
