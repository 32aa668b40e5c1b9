import { afterEach, expect, test } from "vitest";
import { httpBootstrap, startEnvoy, stopAllEnvoys, waitFor } from "../support/envoy.ts";
import { startUpstreamApp, type UpstreamApp } from "../support/upstream-app.ts";
import { startReportSink, type ReportSink } from "./report-sink.ts";

let app: UpstreamApp | undefined;
let sink: ReportSink | undefined;
afterEach(async () => {
  await stopAllEnvoys();
  await app?.close();
  await sink?.close();
});

test("a request through Envoy 1.40 moves the filter's gauge and counter", async () => {
  app = await startUpstreamApp();
  sink = await startReportSink();
  const envoy = await startEnvoy(httpBootstrap({
    upstreamPort: app.port, agentPort: sink.port, configuration: { heartbeat_ms: 200, instance: "load-test", epoch: 3 },
  }), { concurrency: 2 });
  const url = `http://127.0.0.1:${envoy.port("ingress")}`;
  const pending = fetch(`${url}/hold`);
  await app.until((a) => a.held === 1);
  const during = await envoy.stats("^wasmcustom\\.lastcall_");
  expect(during["wasmcustom.lastcall_inflight"]).toBe(1);
  const report = await sink.next((r) => r.reason === "heartbeat" && r.inflight === 1);
  expect(report).toMatchObject({ instance: "load-test", epoch: 3, draining: false });
  expect(report.headers["x-lastcall-token"]).toBeUndefined(); // no token configured: no header
  app.release();
  expect(await (await pending).text()).toBe("released");
  const after = await waitFor(async () => {
    const stats = await envoy.stats("^wasmcustom\\.lastcall_");
    return stats["wasmcustom.lastcall_inflight"] === 0 ? stats : undefined;
  }, { what: "the gauge back at 0" });
  expect(after["wasmcustom.lastcall_streams_total"]).toBe(1);
});
