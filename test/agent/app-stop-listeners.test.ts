// The app's preStop ends a proxy left with nothing to do on every listener kind, not only a TCP
// HTTP listener: a slow reader on a unix-socket listener and one through a tcp_proxy listener get
// every byte, and the hook answers once Envoy has stopped after them. Real Envoy, real lastcall,
// the defaults (--min-drain 5s); the pod's end as the native sidecar's preStop starts it.
import { describe, it } from "vitest";
import { tcpProxyConfig } from "../support/envoy-bootstrap.ts";
import { unixSocketConfig } from "../support/lastcall.ts";
import { serving, upstreamForFile } from "../support/serving.ts";
import { slowDownload } from "../support/slow-reader.ts";
import { BODY, RATE } from "./delivery-support.ts";
import { podEndsUnder } from "./app-stop-support.ts";

const app = upstreamForFile();

describe("the app's preStop on other listener kinds, once every byte is delivered", () => {
  it("a unix-socket HTTP listener: a slow reader gets every byte; the hook answers after Envoy's stop", async () => {
    const { config, path } = unixSocketConfig(app.port);
    // No port to wait for: the listener is a path.
    const { lc, status } = await serving(app.port, [], { config, listener: null });
    await podEndsUnder(lc, status, slowDownload({ path }, `/bytes?n=${BODY}`, RATE));
  });

  it("a tcp_proxy listener: a slow reader through it gets every byte; the hook answers after Envoy's stop", async () => {
    const { lc, port, status } = await serving(app.port, [], {
      config: tcpProxyConfig(app.port),
      listener: "tcp_in",
    });
    await podEndsUnder(lc, status, slowDownload(port, `/bytes?n=${BODY}`, RATE));
  });
});
