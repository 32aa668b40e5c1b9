// Another service the pod's app calls while it shuts down. It runs on the host's Node inside
// the pod's network namespace (`nsenter --net`) at 127.0.0.1:9090, so it outlives the pod's
// containers, as a real backend does. Each request is answered after 50 ms; one JSON line per
// request on stdout: { event: "request", path, t } (epoch ms), and { event: "listening" }.
import { createServer } from "node:http";

const server = createServer((req, res) => {
  console.log(JSON.stringify({ event: "request", path: req.url, t: Date.now() }));
  setTimeout(() => res.end("ok\n"), 50);
});
server.listen(9090, "127.0.0.1", () => console.log(JSON.stringify({ event: "listening", t: Date.now() })));
process.on("SIGTERM", () => process.exit(0));
