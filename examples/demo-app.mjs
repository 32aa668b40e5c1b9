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
server.listen(port, "127.0.0.1");
process.on("SIGTERM", () => server.close(() => process.exit(0)));
export default server;
