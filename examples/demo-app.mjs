#!/usr/bin/env node
// The demo's upstream app: `/` answers at once, `/slow?ms=3000` answers after a while, so a
// drain can be watched letting a long request finish; `/download?mb=30` sends that many
// megabytes, for a slow reader (`curl --limit-rate 3M`) to receive across a drain.
import { createServer } from "node:http";

const port = Number(process.env.DEMO_APP_PORT ?? 8080);
const server = createServer((req, res) => {
  const url = new URL(req.url ?? "/", "http://app");
  const ms = Math.min(Number(url.searchParams.get("ms") ?? 0) || 0, 600_000);
  if (url.pathname === "/download") {
    const bytes = Math.min(Number(url.searchParams.get("mb") ?? 10) || 0, 1024) * 1_000_000;
    res.writeHead(200, { "content-type": "application/octet-stream", "content-length": String(bytes) });
    const chunk = Buffer.alloc(64 * 1024, 120);
    let left = bytes;
    const pump = () => {
      while (left > 0) {
        const piece = chunk.subarray(0, Math.min(chunk.length, left));
        left -= piece.length;
        if (!res.write(piece)) return void res.once("drain", pump);
      }
      res.end();
    };
    return pump();
  }
  setTimeout(() => {
    res.writeHead(200, { "content-type": "text/plain" });
    res.end(`hello from the demo app (${url.pathname}${ms ? `, after ${ms} ms` : ""})\n`);
  }, url.pathname === "/slow" ? ms : 0);
});
// 127.0.0.1 behind a proxy on the same host; DEMO_APP_HOST=0.0.0.0 as an app in a pod listens.
server.listen(port, process.env.DEMO_APP_HOST ?? "127.0.0.1");
// A graceful stop: finish what is in flight, then exit. The proxy in front keeps connections to
// the app open, and close() waits for every one to end; closeIdleConnections() ends only those
// that finished a request, not one the proxy opened and has not used yet (measured: such a
// connection held a pod until its SIGKILL). So on SIGTERM every connection without a request in
// progress or on its way is closed, and each other one once its response is done.
const requests = new Map(); // socket -> requests in progress
let stopping = false;
const closeIfIdle = (socket) => {
  if ((requests.get(socket) ?? 0) === 0 && (socket.bytesRead === 0 || socket.handledOne)) socket.destroy();
};
const sockets = new Set();
server.on("connection", (socket) => {
  sockets.add(socket);
  socket.once("close", () => (sockets.delete(socket), requests.delete(socket)));
});
server.on("request", (req, res) => {
  const socket = req.socket;
  requests.set(socket, (requests.get(socket) ?? 0) + 1);
  res.once("close", () => {
    requests.set(socket, requests.get(socket) - 1);
    socket.handledOne = true;
    if (stopping) closeIfIdle(socket);
  });
});
// What the app saw, as JSON lines on stderr: when its SIGTERM came and when it exits.
const say = (event) => console.error(JSON.stringify({ ts: new Date().toISOString(), event }));
process.on("SIGTERM", () => {
  say("app_sigterm");
  stopping = true;
  server.close(() => (say("app_exit"), process.exit(0)));
  for (const socket of sockets) closeIfIdle(socket);
});
export default server;
