// A gRPC-style upstream: one server stream per call, length-prefixed messages written as fast as
// HTTP/2 flow control lets them through, then trailers (`grpc-status: 0`). Over h2c.
import { createServer, type ServerHttp2Stream } from "node:http2";
import type { AddressInfo } from "node:net";

/** A running gRPC-style upstream. */
export interface GrpcStreamServer {
  port: number;
  close(): Promise<void>;
}

/** Length-prefixed gRPC frame: flag 0 (not compressed), 4-byte big-endian length, payload. */
function grpcMessage(payload: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt32BE(payload.length, 1);
  return Buffer.concat([head, payload]);
}

function serveStream(stream: ServerHttp2Stream, messages: number, size: number): void {
  stream.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
  stream.on("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
  stream.on("error", () => {});
  const message = grpcMessage(Buffer.alloc(size, 103));
  let left = messages;
  const pump = () => {
    while (left > 0) {
      left--;
      if (!stream.write(message)) return void stream.once("drain", pump);
    }
    stream.end();
  };
  pump();
}

/**
 * Starts the server: `POST /stream?messages=N&size=S` streams N messages of S bytes.
 *
 * @example
 * ```ts
 * const grpc = await startGrpcStreamServer(); // then route an h2 cluster to grpc.port
 * ```
 */
export async function startGrpcStreamServer(): Promise<GrpcStreamServer> {
  const server = createServer();
  server.on("stream", (stream, headers) => {
    stream.resume(); // the request's (empty) message
    const url = new URL(String(headers[":path"] ?? "/"), "http://grpc");
    serveStream(
      stream,
      Number(url.searchParams.get("messages") ?? 1),
      Number(url.searchParams.get("size") ?? 1024),
    );
  });
  server.on("sessionError", () => {});
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  return {
    port: (server.address() as AddressInfo).port,
    close: () => new Promise<void>((done) => server.close(() => done())),
  };
}
