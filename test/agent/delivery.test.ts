// The promise in bytes: "done" is the client's last byte, not the end of Envoy's stream. A slow
// reader (3 MB/s, a phone on a poor link) downloads 30 MB through Envoy; SIGTERM comes 1 s in,
// on lastcall's defaults. Envoy finishes the stream long before the client has read it (the
// rest sits in Envoy's buffer and the kernel's send queue); lastcall waits until it is delivered.
import { describe, expect, it } from "vitest";
import { undelivered } from "../../agent/envoy/sockets.ts";
import { httpBootstrap, startEnvoy, waitFor } from "../support/envoy.ts";
import { type Serving, serving, upstreamForFile } from "../support/serving.ts";
import { slowDownload } from "../support/slow-reader.ts";

const app = upstreamForFile();
const BODY = 30_000_000;
const RATE = 3_000_000;

async function slowReaderAcrossSigterm({ lc, port }: Serving) {
  const download = slowDownload(port, `/bytes?n=${BODY}`, RATE);
  await download.reached(RATE); // about 1 s in
  lc.signal("SIGTERM");
  const read = await download.done;
  const terminated = await lc.event("terminated");
  expect(read).toEqual({ status: 200, expected: BODY, received: BODY, endedBy: "fin" });
  expect(terminated).toMatchObject({ inflight_at_stop: 0, bytes_unsent_at_stop: 0 });
  // The stream ended for Envoy while bytes were still on their way: the drain waited for them.
  expect(lc.events.map((e) => e.event)).toContain("drain_flushing");
  expect(await lc.exited).toEqual({ code: 0, signal: null });
  return terminated;
}

describe("a slow reader across SIGTERM", () => {
  it("gets every byte of 30 MB at 3 MB/s, on the defaults (inflight mode)", async () => {
    const terminated = await slowReaderAcrossSigterm(await serving(app.port, []));
    expect(terminated).toMatchObject({ mode: "inflight", reason: "inflight_zero" });
  });

  it("gets every byte in requests mode too", async () => {
    const terminated = await slowReaderAcrossSigterm(await serving(app.port, ["--drain-mode", "requests"]));
    expect(terminated).toMatchObject({ mode: "requests", reason: "requests_zero" });
  });
});

// What docs/filter.md says of bytes still in the kernel's send queue when Envoy exits, measured:
// Envoy's exit closes the socket; the kernel keeps sending what it holds (the socket lingers in
// FIN_WAIT1) and ends with FIN after the last byte. What Envoy itself still buffered is lost.
describe("bytes in the kernel's send queue when Envoy exits", () => {
  it("are delivered by the kernel after Envoy is gone; Envoy's own buffer was empty", async () => {
    const envoy = await startEnvoy(httpBootstrap({ upstreamPort: app.port }));
    const download = slowDownload(envoy.port("ingress"), `/bytes?n=${BODY}`, RATE);
    await download.reached(RATE);
    // Wait until Envoy has handed everything to the kernel: the app's response is complete and
    // Envoy buffers nothing, while the kernel still holds a send queue for the reader.
    const queued = await waitFor(async () => {
      const buffered = (await envoy.stats("downstream_cx_tx_bytes_buffered$"))["http.ingress.downstream_cx_tx_bytes_buffered"];
      const left = await undelivered(envoy.pid);
      return app.inflight === 0 && buffered === 0 && left && left.bytes > 0 ? left.bytes : undefined;
    }, { what: "Envoy's buffer empty with bytes in the kernel's queue", timeoutMs: 30_000, intervalMs: 10 });
    await fetch(`${envoy.adminUrl}/quitquitquit`, { method: "POST" });
    await envoy.exited;
    const read = await download.done;
    console.log(`kernel send queue at Envoy's exit: ${queued} bytes; the reader got ${read.received} of ${read.expected}, ended by ${read.endedBy}`);
    expect(read).toEqual({ status: 200, expected: BODY, received: BODY, endedBy: "fin" });
  });
});
