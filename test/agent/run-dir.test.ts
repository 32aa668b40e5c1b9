// A `--run-dir` reused after a SIGKILL: the run folder is made fresh at every start.
import { execFile } from "node:child_process";
import {
  chmodSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { waitFor } from "../support/envoy.ts";
import {
  freePort,
  inboundConfig,
  isAlive,
  lastcallCommand,
  startLastcall,
  writeConfig,
} from "../support/lastcall.ts";
import { agentState, heldAcrossSigterm, upstreamForFile } from "../support/serving.ts";

const app = upstreamForFile();
const root = mkdtempSync(join(tmpdir(), "lastcall-rundir-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const mode = (path: string) => statSync(path).mode & 0o777;

describe("a --run-dir reused after lastcall was SIGKILLed, --admin-port 0", () => {
  it("starts fresh: the stale admin address is not read, modes are 0700/0600, a request held across SIGTERM gets its 200", async () => {
    const runDir = join(root, "run"); // missing: lastcall creates it
    const config = writeConfig(inboundConfig({ upstreamPort: app.port }), root);
    const first = startLastcall(config, { args: ["--run-dir", runDir] });
    const firstReady = await first.event("ready");
    const envoyPid = Number(firstReady.pid);
    const adminFile = readdirSync(runDir).find((name) => name.startsWith("admin-"))!;
    expect(adminFile).toBe("admin-g1-epoch0");

    // The kubelet's kill: lastcall gets no chance to clean up; its watchdog stops Envoy.
    first.signal("SIGKILL");
    await first.exited;
    await waitFor(() => (isAlive(envoyPid) ? undefined : true), {
      what: "the watchdog to stop the orphaned Envoy",
      timeoutMs: 15_000,
    });

    // What is left, made worse: an admin address pointing at a dead port, a bootstrap 0666.
    const deadPort = await freePort();
    writeFileSync(join(runDir, adminFile), `127.0.0.1:${deadPort}`);
    const bootstrap = join(runDir, "envoy-g1-epoch0.json");
    chmodSync(bootstrap, 0o666);
    chmodSync(runDir, 0o755);

    // Defaults but for --run-dir (admin and status ports 0, as startLastcall gives).
    const lc = startLastcall(config, { args: ["--run-dir", runDir] });
    const ready = await lc.event("ready");
    expect(ready.admin).not.toBe(`http://127.0.0.1:${deadPort}`);
    expect((await fetch(`${String(ready.admin)}/ready`)).status).toBe(200);
    expect(readFileSync(join(runDir, adminFile), "utf8")).not.toContain(`:${deadPort}`);
    expect(mode(runDir)).toBe(0o700);
    expect(mode(bootstrap)).toBe(0o600);
    expect(readFileSync(bootstrap, "utf8")).toContain("token");

    const status = await lc.statusUrl();
    await waitFor(
      async () => ((await agentState(status)).filter === "reporting" ? true : undefined),
      { what: "the filter's first report" },
    );
    const port = await lc.listenerPort("ingress");
    await heldAcrossSigterm(app, lc, port, status);
    expect(await lc.exited).toEqual({ code: 0, signal: null });
  });

  it("refuses a folder holding files lastcall did not write: one line, exit 2, the files untouched", async () => {
    const runDir = mkdtempSync(join(root, "shared-"));
    writeFileSync(join(runDir, "notes.txt"), "someone's");
    const config = writeConfig(inboundConfig({ upstreamPort: app.port }), root);
    const [command, ...prefix] = lastcallCommand();
    const result = await new Promise<{ code: number | null; stdout: string; stderr: string }>(
      (resolve) => {
        execFile(
          command,
          [
            ...prefix,
            "run",
            "--config",
            config,
            "--admin-port",
            "0",
            "--status-port",
            "0",
            "--run-dir",
            runDir,
          ],
          { timeout: 30_000 },
          (error, stdout, stderr) =>
            resolve({
              code: error ? (error as { code?: number }).code ?? null : 0,
              stdout,
              stderr,
            }),
        );
      },
    );
    expect(result).toMatchObject({ code: 2, stdout: "" });
    expect(result.stderr.split("\n").filter(Boolean)).toEqual([
      `lastcall: Cannot use --run-dir ${runDir}: it holds files lastcall did not write (notes.txt); give lastcall a folder of its own`,
    ]);
    expect(readdirSync(runDir)).toEqual(["notes.txt"]);
  });
});
