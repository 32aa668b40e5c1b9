#!/usr/bin/env node
// The demo's upstream app: `/` answers at once, `/slow?ms=3000` answers after a while, so a
// drain can be watched letting a long request finish.
import { createServer } from "node:http";

const port = Number(process.env.DEMO_APP_PORT ?? 8080);
const server = createServer((req, res) => {
  const url = new URL(req.url ?? "/", "http://app");
  const ms = Math.min(Number(url.searchParams.get("ms") ?? 0) || 0, 600_000);
  setTimeout(() => {
    res.writeHead(200, { "content-type": "text/plain" });
    res.end(`hello from the demo app (${url.pathname}${ms ? `, after ${ms} ms` : ""})\n`);
  }, url.pathname === "/slow" ? ms : 0);
});
server.listen(port, "127.0.0.1");
process.on("SIGTERM", () => server.close(() => process.exit(0)));
export default server;
