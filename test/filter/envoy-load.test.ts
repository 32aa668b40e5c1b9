import { afterEach, expect, test } from "vitest";
import { httpBootstrap } from "../support/envoy-bootstrap.ts";
import { startEnvoy, stopAllEnvoys, waitFor } from "../support/envoy.ts";
import { startUpstreamApp, type UpstreamApp } from "../support/upstream-app.ts";
import { type ReportSink, startReportSink } from "./report-sink.ts";

let app: UpstreamApp | undefined;
let sink: ReportSink | undefined;
afterEach(async () => {
  await stopAllEnvoys();
  await app?.close();
  await sink?.close();
});

test("a request through Envoy 1.40 moves the filter's gauge (odd epoch: lastcall_inflight_odd) and, at the next tick, its counter", async () => {
  app = await startUpstreamApp();
  sink = await startReportSink();
  const envoy = await startEnvoy(
    httpBootstrap({
      upstreamPort: app.port,
      agentPort: sink.port,
      configuration: { heartbeat_ms: 200, instance: "load-test", epoch: 3 },
    }),
    { concurrency: 2 },
  );
  const url = `http://127.0.0.1:${envoy.port("ingress")}`;
  const pending = fetch(`${url}/hold`);
  await app.until((a) => a.held === 1);
  const during = await envoy.stats("^wasmcustom\\.lastcall_");
  expect(during["wasmcustom.lastcall_inflight_odd"]).toBe(1);
  expect(during["wasmcustom.lastcall_inflight"]).toBeUndefined(); // the even epochs' gauge is never defined
  const report = await sink.next((r) => r.reason === "heartbeat" && r.inflight === 1);
  expect(report).toMatchObject({ instance: "load-test", epoch: 3, draining: false });
  expect(report.headers["x-lastcall-token"]).toBeUndefined(); // no token configured: no header
  app.release();
  expect(await (await pending).text()).toBe("released");
  await waitFor(
    async () => ((await envoy.stats("^wasmcustom\\.lastcall_inflight_odd$"))[
        "wasmcustom.lastcall_inflight_odd"
      ] === 0
      ? true
      : undefined),
    { what: "the gauge back at 0" },
  );
  // The VM that served it adds it to the counter at its next tick (heartbeat_ms), not at once.
  await waitFor(
    async () => ((await envoy.stats("^wasmcustom\\.lastcall_streams_total$"))[
        "wasmcustom.lastcall_streams_total"
      ] === 1
      ? true
      : undefined),
    { what: "lastcall_streams_total = 1" },
  );
});
