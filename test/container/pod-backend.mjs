// A backend beside the pod: another service the app calls, or the upstream a proxy forwards to.
// It runs on the host's Node inside the pod's network namespace (`nsenter --net`) at
// 127.0.0.1:9090, so it outlives the pod's containers, as a real backend does. `?ms=N` answers
// after N ms (else 50 ms) with "hello from the backend (PATH, after N ms)". One JSON line per
// request on stdout, { event: "request", path, t } (epoch ms), and { event: "listening" }.
import { createServer } from "node:http";

const server = createServer((req, res) => {
  const url = new URL(req.url ?? "/", "http://backend");
  const ms = Math.min(Number(url.searchParams.get("ms") ?? 50) || 0, 600_000);
  console.log(JSON.stringify({ event: "request", path: req.url, t: Date.now() }));
  setTimeout(() => res.end(`hello from the backend (${url.pathname}, after ${ms} ms)\n`), ms);
});
server.listen(9090, "127.0.0.1", () => console.log(JSON.stringify({ event: "listening", t: Date.now() })));
process.on("SIGTERM", () => process.exit(0));
