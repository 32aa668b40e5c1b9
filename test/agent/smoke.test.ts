// The whole loop, end to end, in each way lastcall ships: run → wait → request → SIGTERM →
// exit 0 with Envoy gone. Real Envoy, real sockets, real signals.
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { resolveDeno } from "../../build/deno.mjs";
import { waitFor } from "../support/envoy.ts";
import {
  inboundConfig,
  isAlive,
  lastcallCommand,
  type Runtime,
  startLastcall,
  stopAllLastcalls,
} from "../support/lastcall.ts";
import { startUpstreamApp, type UpstreamApp } from "../support/upstream-app.ts";

const run = promisify(execFile);
let app: UpstreamApp;
beforeAll(async () => (app = await startUpstreamApp()));
afterAll(() => app.close());
afterEach(stopAllLastcalls);

describe.each<Runtime>(["bundle", "binary", "deno"])("lastcall (%s)", (runtime) => {
  // The pinned Deno is installed on first use (build/deno.mjs), outside the test's own timeout.
  beforeAll(() => void (runtime === "deno" && resolveDeno()), 180_000);
  it("runs Envoy with the filter, waits for ready, serves, and stops Envoy on SIGTERM", async () => {
    const lc = startLastcall(inboundConfig({ upstreamPort: app.port }), {
      runtime,
      args: ["--min-drain", "0s"],
    });
    const start = await lc.event("start");
    expect(start.filter).toEqual(["ingress"]);

    const [command, ...prefix] = lastcallCommand(runtime);
    const waited = await run(command, [
      ...prefix,
      "wait",
      "--timeout",
      "30s",
      "--status-url",
      `${await lc.statusUrl()}/healthz/ready`,
    ]);
    expect(waited.stderr).toBe("");
    const ready = await fetch(`${await lc.statusUrl()}/healthz/ready`);
    expect(ready.status).toBe(200);

    const port = await lc.listenerPort("ingress");
    const response = await fetch(`http://127.0.0.1:${port}/delay?ms=1`);
    expect(response.status).toBe(200);
    await response.text();
    // The filter inside Envoy counted that request (each worker adds what it finished on its timer).
    const streamsTotal = async () => {
      const stats = await fetch(`${lc.adminUrl()}/stats?filter=lastcall_streams_total&format=json`)
        .then((r) => r.json());
      return stats.stats.find((s: { name: string }) =>
        s.name === "wasmcustom.lastcall_streams_total"
      )?.value ?? 0;
    };
    await waitFor(async () => ((await streamsTotal()) >= 1 ? true : undefined), {
      what: "lastcall_streams_total to count the request",
    });

    const envoyPid = Number(start.pid);
    expect(isAlive(envoyPid)).toBe(true);
    const exit = await lc.stop("SIGTERM");
    expect(exit).toEqual({ code: 0, signal: null });
    expect(lc.events.map((e) => e.event)).toContain("terminated");
    await waitFor(() => (isAlive(envoyPid) ? undefined : true), {
      what: `Envoy ${envoyPid} to be gone`,
    });
  });
});

// The image and a VM install ship dist/lastcall alone: the filter must come from inside it (an
// asset of the single executable), not from dist/filter.wasm beside it, where the tests above
// find one. Seen broken by `useCodeCache` (import() fails inside the executable): only the
// container tests noticed.
it("the single executable alone, with no filter.wasm beside it, runs Envoy with its own filter", async () => {
  const alone = mkdtempSync(join(tmpdir(), "lastcall-alone-"));
  try {
    // Copied by the wrapper, then run in its place: `$0` is dist/lastcall, `$@` its arguments.
    const lc = startLastcall(inboundConfig({ upstreamPort: app.port }), {
      runtime: "binary",
      wrap: ["sh", "-c", `cp "$0" ${alone}/lastcall && exec ${alone}/lastcall "$@"`],
    });
    expect((await lc.event("start")).filter).toEqual(["ingress"]);
    await lc.event("ready");
    const response = await fetch(`http://127.0.0.1:${await lc.listenerPort("ingress")}/delay?ms=1`);
    expect(response.status).toBe(200);
    await response.text();
    expect(await lc.stop("SIGTERM")).toEqual({ code: 0, signal: null });
  } finally {
    rmSync(alone, { recursive: true, force: true });
  }
});

// The executable compiles its bundle with V8's code cache of a start (build/sea-main.cjs): a cache
// V8 refuses (another Node, other V8 flags) costs every start its compile again, unseen.
it("the single executable starts on its code cache, which V8 takes", async () => {
  const [binary] = lastcallCommand("binary");
  const { stdout, stderr } = await run(binary, ["--version"], {
    env: { ...process.env, LASTCALL_CODE_CACHE: "report", NODE_OPTIONS: "" },
  });
  expect(stdout.trim()).toMatch(/^\d+\.\d+\.\d+$/);
  expect(stderr).toMatch(/^lastcall: code cache taken \(\d+ bytes\)$/m);
});
