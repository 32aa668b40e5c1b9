// examples/vm/lastcall.service: systemd accepts it (`systemd-analyze verify`, when installed),
// and its stop timings agree with lastcall's --grace.
import { spawnSync } from "node:child_process";
import {
  chmodSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parseDuration } from "../../agent/lib/duration.ts";
import { flagValue } from "../../agent/k8s/containers.ts";
import { root as repoRoot } from "../support/paths.ts";

const unitPath = join(repoRoot, "examples/vm/lastcall.service");
const unit = readFileSync(unitPath, "utf8");
/** The value of `Key=` in the unit (the last one wins, as in systemd). */
const directive = (key: string) =>
  [...unit.matchAll(new RegExp(`^${key}=(.*)$`, "gm"))].at(-1)?.[1];

function findSystemdAnalyze(): string | undefined {
  const found = spawnSync("sh", ["-c", "command -v systemd-analyze"], { encoding: "utf8" });
  return found.status === 0 ? found.stdout.trim() : undefined;
}
const systemdAnalyze = findSystemdAnalyze();
const INSTALL = "apt-get install -y systemd";
if (!systemdAnalyze) {
  console.warn(
    `systemd.test.ts: systemd-analyze not found, skipping the verify test; install it with: ${INSTALL}`,
  );
}

describe("examples/vm/lastcall.service", () => {
  it.skipIf(!systemdAnalyze)(
    `passes systemd-analyze verify${
      systemdAnalyze ? "" : ` (skipped: systemd-analyze not found; ${INSTALL})`
    }`,
    () => {
      // A root of its own: the unit as installed, stand-ins for the programs it runs (verify
      // checks they exist and are executable), and systemd's own units it depends on.
      const root = mkdtempSync(join(tmpdir(), "lastcall-systemd-"));
      mkdirSync(join(root, "etc/systemd/system"), { recursive: true });
      writeFileSync(join(root, "etc/systemd/system/lastcall.service"), unit);
      for (const program of ["usr/local/bin/lastcall", "bin/kill"]) {
        mkdirSync(join(root, program, ".."), { recursive: true });
        writeFileSync(join(root, program), "#!/bin/sh\n");
        chmodSync(join(root, program), 0o755);
      }
      for (const dir of ["lib/systemd/system", "usr/lib/systemd/system"]) {
        if (existsSync(`/${dir}`)) cpSync(`/${dir}`, join(root, dir), { recursive: true });
      }
      const result = spawnSync(systemdAnalyze!, [
        "verify",
        "--man=no",
        `--root=${root}`,
        "lastcall.service",
      ], { encoding: "utf8" });
      // verify exits 0 on mere warnings (an unknown directive, a bad value): any output fails too.
      expect({ status: result.status, output: `${result.stdout}${result.stderr}` }).toEqual({
        status: 0,
        output: "",
      });
    },
  );

  it("signals lastcall only (KillMode=mixed, SIGTERM), so Envoy gets lastcall's drain", () => {
    expect(directive("KillMode")).toBe("mixed");
    expect(directive("KillSignal")).toBe("SIGTERM");
  });

  it("gives lastcall its --grace plus a margin before systemd's SIGKILL", () => {
    const execStart = directive("ExecStart")!.split(/\s+/);
    expect(execStart.slice(0, 2)).toEqual(["/usr/local/bin/lastcall", "run"]);
    const graceMs = parseDuration(flagValue(execStart, "--grace")!);
    const stopMs = parseDuration(directive("TimeoutStopSec")!);
    expect(stopMs).toBeGreaterThan(graceMs);
    expect(stopMs - graceMs).toBeLessThanOrEqual(10_000);
  });

  it("restarts on failure, but not after a config error (exit 2)", () => {
    expect(directive("Restart")).toBe("on-failure");
    expect(directive("RestartPreventExitStatus")).toBe("2");
  });

  it("holds dependants until Envoy is ready, like Kubernetes' postStart", () => {
    expect(directive("ExecStartPost")).toMatch(/^\/usr\/local\/bin\/lastcall wait\b/);
  });
});
