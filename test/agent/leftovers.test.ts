// `lastcall run` leaves nothing in the temp folder after any exit but SIGKILL.
import { execFile } from "node:child_process";
import { readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { http1 } from "../filter/clients.ts";
import { localCluster } from "../support/envoy-bootstrap.ts";
import { waitFor } from "../support/envoy.ts";
import {
  inboundConfig,
  isAlive,
  lastcallCommand,
  startLastcall,
  writeConfig,
} from "../support/lastcall.ts";
import { heldAcrossSigterm, upstreamForFile } from "../support/serving.ts";
import { tempDir } from "../support/temp.ts";

const app = upstreamForFile();
const LISTENER = "type.googleapis.com/envoy.config.listener.v3.Listener";

/** Runs lastcall to its end with `TMPDIR` set; resolves with its exit code and stderr. */
function runToEnd(args: string[], tmp: string): Promise<{ code: number | null; stderr: string }> {
  const [command, ...prefix] = lastcallCommand();
  return new Promise((resolve) => {
    execFile(
      command,
      [...prefix, ...args],
      { timeout: 30_000, env: { ...process.env, TMPDIR: tmp } },
      (error, _stdout, stderr) =>
        resolve({ code: error ? (error as { code?: number }).code ?? null : 0, stderr }),
    );
  });
}

describe("lastcall run leaves nothing in the temp folder", () => {
  it("after SIGTERM on the defaults: the run folder is there while it runs, gone after (a request held across it answered)", async () => {
    const tmp = tempDir("lastcall-own-");
    const lc = startLastcall(inboundConfig({ upstreamPort: app.port }), { env: { TMPDIR: tmp } });
    await lc.event("ready");
    expect(readdirSync(tmp)).toEqual([expect.stringMatching(/^lastcall-[A-Za-z0-9]{6}$/)]);
    const status = await lc.statusUrl();
    const port = await lc.listenerPort("ingress");
    await waitFor(async () => ((await http1(port, "/")).status === 200 ? true : undefined), {
      what: "the listener",
    });
    await heldAcrossSigterm(app, lc, port, status);
    expect(await lc.exited).toEqual({ code: 0, signal: null });
    expect(readdirSync(tmp)).toEqual([]);
  });

  it("after SIGTERM with LDS and a --run-dir too long for a socket: the xDS socket's own folder is removed too", async () => {
    const tmp = tempDir("lastcall-own-");
    const dir = tempDir("lastcall-lds-");
    const ldsPath = join(dir, "lds.json");
    const address = { socket_address: { address: "127.0.0.1", port_value: 0 } };
    writeFileSync(
      ldsPath,
      JSON.stringify({
        resources: [{
          "@type": LISTENER,
          ...(inboundConfig({ upstreamPort: app.port }).static_resources as { listeners: object[] })
            .listeners[0],
          address,
        }],
      }),
    );
    const runDir = join(dir, "r".repeat(100)); // no room left for a socket's name
    const lc = startLastcall(
      writeConfig({
        node: { id: "lastcall-test", cluster: "test" },
        dynamic_resources: {
          lds_config: { resource_api_version: "V3", path_config_source: { path: ldsPath } },
        },
        static_resources: { clusters: [localCluster("app", app.port)] },
      }, dir),
      { args: ["--run-dir", runDir, "--min-drain", "0s"], env: { TMPDIR: tmp } },
    );
    await lc.event("xds_listeners");
    await lc.event("ready");
    expect(readdirSync(tmp)).toEqual([expect.stringMatching(/^lastcall-xds-/)]);
    lc.signal("SIGTERM");
    expect(await lc.exited).toEqual({ code: 0, signal: null });
    expect(readdirSync(tmp)).toEqual([]);
  });

  it("with a --run-dir too long for a socket and no LDS: no socket folder is made at all", async () => {
    const tmp = tempDir("lastcall-own-");
    const runDir = join(tempDir("lastcall-run-"), "r".repeat(100));
    const lc = startLastcall(inboundConfig({ upstreamPort: app.port }), {
      args: ["--run-dir", runDir, "--min-drain", "0s"],
      env: { TMPDIR: tmp },
    });
    await lc.event("ready");
    expect(readdirSync(tmp)).toEqual([]);
    lc.signal("SIGTERM");
    expect(await lc.exited).toEqual({ code: 0, signal: null });
    expect(readdirSync(tmp)).toEqual([]);
  });

  it("after a config Envoy rejects (exit 2) and after a usage error (exit 2)", async () => {
    const tmp = tempDir("lastcall-own-");
    const bad = writeConfig({
      static_resources: {
        listeners: [{
          name: "x",
          address: { socket_address: { address: "127.0.0.1", port_value: 0 } },
          no_such_field: 1,
        }],
      },
    });
    const rejected = await runToEnd([
      "run",
      "--config",
      bad,
      "--admin-port",
      "0",
      "--status-port",
      "0",
    ], tmp);
    expect(rejected.code).toBe(2);
    expect(readdirSync(tmp)).toEqual([]);
    const usage = await runToEnd(["run", "--config", bad, "--grace", "abc"], tmp);
    expect(usage.code).toBe(2);
    expect(readdirSync(tmp)).toEqual([]);
  });

  it("after the restart budget is spent (exit 1)", async () => {
    const tmp = tempDir("lastcall-own-");
    const lc = startLastcall(inboundConfig({ upstreamPort: app.port }), {
      args: ["--restart-budget", "0"],
      env: { TMPDIR: tmp },
    });
    const ready = await lc.event("ready");
    process.kill(Number(ready.pid), "SIGKILL"); // Envoy dies; no restart is left
    await lc.event("gave_up");
    expect(await lc.exited).toEqual({ code: 1, signal: null });
    expect(readdirSync(tmp)).toEqual([]);
  });

  it("after SIGKILL only the run folder is left (lastcall cannot run), nothing else; the test's folder removal takes it", async () => {
    const tmp = tempDir("lastcall-own-");
    const lc = startLastcall(inboundConfig({ upstreamPort: app.port }), { env: { TMPDIR: tmp } });
    const ready = await lc.event("ready");
    lc.signal("SIGKILL");
    await lc.exited;
    await waitFor(() => (isAlive(Number(ready.pid)) ? undefined : true), {
      what: "the watchdog to stop the orphaned Envoy",
      timeoutMs: 15_000,
    });
    expect(readdirSync(tmp)).toEqual([expect.stringMatching(/^lastcall-[A-Za-z0-9]{6}$/)]);
  });
});
