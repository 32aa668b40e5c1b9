// A backend beside the pod, in its network namespace at 127.0.0.1:9090; one JSON line per request
// on stdout.
import { createServer } from "node:http";

const server = createServer((req, res) => {
  const url = new URL(req.url ?? "/", "http://backend");
  const ms = Math.min(Number(url.searchParams.get("ms") ?? 50) || 0, 600_000);
  console.log(JSON.stringify({ event: "request", path: req.url, t: Date.now() }));
  setTimeout(() => res.end(`hello from the backend (${url.pathname}, after ${ms} ms)\n`), ms);
});
server.listen(
  9090,
  "127.0.0.1",
  () => console.log(JSON.stringify({ event: "listening", t: Date.now() })),
);
process.on("SIGTERM", () => process.exit(0));
