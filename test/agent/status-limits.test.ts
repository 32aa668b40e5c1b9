// Every body the status server takes is capped: 200 MB bodies get 413, memory stays put, and
// lastcall still serves and drains.
import { readFileSync } from "node:fs";
import { connect } from "node:net";
import { describe, expect, it } from "vitest";
import { heldAcrossSigterm, serving, upstreamForFile } from "../support/serving.ts";

const app = upstreamForFile();

const MB = 1024 * 1024;

/** Resident memory of process `pid`, in bytes (Linux). */
function rss(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) =>
    l.startsWith("VmRSS:")
  );
  return Number(line!.split(/\s+/)[1]) * 1024;
}

/**
 * POSTs `size` bytes of filler to `url` over a raw socket, with content-length or chunked, writing
 * with back-pressure until the answer comes. (Node's HTTP client reports EPIPE rather than the
 * answer when the server answers early and closes; curl, like this, reads the answer.)
 */
function postLarge(
  url: string,
  size: number,
  chunked: boolean,
): Promise<{ status: number; body: string }> {
  const { hostname, port, pathname } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    let received = "";
    let answer: { status: number; body: string } | undefined;
    const parse = () => {
      const end = received.indexOf("\r\n\r\n");
      if (end < 0) return;
      const head = received.slice(0, end);
      const length = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? NaN);
      const body = received.slice(end + 4);
      if (body.length < length) return;
      answer = { status: Number(head.split(" ")[1]), body: body.slice(0, length) };
      socket.destroy();
      resolve(answer);
    };
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => {
      received += chunk;
      parse();
    });
    socket.on("error", () => {}); // EPIPE or a reset once the server stops reading: the answer tells
    socket.on("close", () => {
      if (!answer) {
        reject(
          new Error(
            `no answer to POST ${pathname} (${size} bytes); got ${
              JSON.stringify(received.slice(0, 200))
            }`,
          ),
        );
      }
    });
    const framing = chunked ? "transfer-encoding: chunked" : `content-length: ${size}`;
    socket.write(
      `POST ${pathname} HTTP/1.1\r\nhost: ${hostname}\r\ncontent-type: application/json\r\n${framing}\r\n\r\n`,
    );
    const piece = Buffer.alloc(64 * 1024, 0x20);
    const frame = chunked
      ? Buffer.concat([Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from("\r\n")])
      : piece;
    let sent = 0;
    const write = () => {
      while (!answer && !socket.destroyed && sent < size) {
        sent += piece.length;
        if (!socket.write(frame)) return void socket.once("drain", write);
      }
      if (!answer && !socket.destroyed) socket.write(chunked ? "0\r\n\r\n" : "");
    };
    write();
  });
}

describe("the status server caps every body (lastcall's defaults)", () => {
  it.runIf(process.platform === "linux")(
    "200 MB to /v1/app, /drain, /quitquitquit, chunked or not: 413, RSS stays put, lastcall still serves and drains",
    async () => {
      const { lc, port, status } = await serving(app.port, []);
      const before = rss(lc.pid);
      for (const path of ["/v1/app", "/drain", "/quitquitquit"]) {
        for (const chunked of [false, true]) {
          const res = await postLarge(`${status}${path}`, 200 * MB, chunked);
          expect(res, `${path} ${chunked ? "chunked" : "content-length"}`).toEqual({
            status: 413,
            body: JSON.stringify({ error: "request body larger than 4096 bytes" }),
          });
        }
      }
      // 1.2 GB offered in all; what lastcall keeps is at most a few buffers.
      expect(rss(lc.pid) - before).toBeLessThan(48 * MB);
      expect((await fetch(`${status}/healthz/ready`)).status).toBe(200);
      expect(lc.events.map((e) => e.event)).not.toContain("drain_start");
      // Still counting and draining as before.
      await heldAcrossSigterm(app, lc, port, status);
    },
  );

  it("200 MB to /v1/inflight without the token: 403 before the body is read, lastcall still answers", async () => {
    const { lc, status } = await serving(app.port, ["--min-drain", "0s"]);
    // No token: refused before the body is read, whatever its size.
    const res = await postLarge(`${status}/v1/inflight`, 200 * MB, false);
    expect(res).toEqual({
      status: 403,
      body: JSON.stringify({ error: "report token missing or wrong" }),
    });
    expect((await fetch(`${status}/healthz/live`)).status).toBe(200);
    expect((await lc.stop()).code).toBe(0);
  });
});
