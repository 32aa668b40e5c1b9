// Envoy arguments after `--` that clash with what lastcall passes Envoy (agent/envoy/args.ts)
// are refused with the argument and the lastcall way; an Envoy that is not Envoy is refused.
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { afterAll, describe, expect, it } from "vitest";
import {
  CLASHING_ENVOY_FLAGS,
  envoyArgClash,
  refuseEnvoyArgClash,
} from "../../agent/envoy/arg-clash.ts";
import { envoyArgs } from "../../agent/envoy/args.ts";
import { identifyEnvoy } from "../../agent/envoy/identify.ts";
import { StartError } from "../../agent/lib/errors.ts";
import { waitFor } from "../support/envoy.ts";

describe("envoyArgClash", () => {
  it("refuses every flag lastcall sets itself, in both spellings, naming the argument and the lastcall flag", () => {
    expect(envoyArgClash(["--concurrency", "4"])).toBe(
      "Envoy argument --concurrency clashes with lastcall's own: use lastcall's --concurrency",
    );
    expect(envoyArgClash(["-l", "info", "--drain-time-s=3"])).toBe(
      "Envoy argument --drain-time-s=3 clashes with lastcall's own: use lastcall's --drain-time",
    );
    expect(envoyArgClash(["-c", "other.yaml"])).toContain("use lastcall's --config");
    expect(envoyArgClash(["--config-yaml", "{}"])).toContain("use lastcall's --config");
    expect(envoyArgClash(["--mode=validate"])).toContain("--mode=validate");
    expect(envoyArgClash(["--disable-hot-restart"])).toContain("--no-hot-restart");
  });

  it("covers every flag envoyArgs passes", () => {
    const launch = {
      configPath: "/c",
      concurrency: 2,
      baseIdPath: "/b",
      adminAddressPath: "/a",
      drainTimeMs: 5000,
      parentShutdownMs: 10_000,
      extraArgs: [],
    };
    const own = [
      ...envoyArgs({ ...launch, epoch: 0, hotRestart: true }),
      ...envoyArgs({ ...launch, epoch: 1, baseId: 7, hotRestart: true }),
      ...envoyArgs({ ...launch, epoch: 0, hotRestart: false }),
    ].filter((a) => a.startsWith("-"));
    for (const flag of own) expect(CLASHING_ENVOY_FLAGS, flag).toContain(flag);
  });

  it("any clashing flag anywhere among other arguments is found; arguments that only look alike pass", () => {
    const harmless = fc.constantFrom(
      "-l",
      "info",
      "--log-level",
      "debug",
      "--service-cluster",
      "web",
      "--component-log-level",
      "upstream:debug",
      "--concurrency-limit",
      "--base-identity",
      "-cx",
      "concurrency",
      "--log-path=/dev/stderr",
    );
    fc.assert(
      fc.property(
        fc.array(harmless),
        fc.array(harmless),
        fc.constantFrom(...CLASHING_ENVOY_FLAGS),
        fc.boolean(),
        (before, after, flag, equals) => {
          expect(envoyArgClash([...before, ...after])).toBeUndefined();
          const arg = equals ? `${flag}=1` : flag;
          const line = envoyArgClash([...before, arg, ...after]);
          expect(line).toMatch(
            new RegExp(
              `^Envoy argument ${arg.replace(/[-=]/g, "\\$&")} clashes with lastcall's own: `,
            ),
          );
          expect(line).not.toContain("\n");
        },
      ),
    );
  });

  it("refuseEnvoyArgClash throws a StartError (exit 2)", () => {
    expect(() => refuseEnvoyArgClash(["--restart-epoch", "1"])).toThrow(StartError);
    expect(() => refuseEnvoyArgClash(["-l", "debug"])).not.toThrow();
  });
});

/** Whether `pid` runs (a zombie waiting for a reaper has stopped). */
function running(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/stat`, "utf8").replace(/^.*\) /s, "")[0] !== "Z";
  } catch {
    return false;
  }
}

describe("identifyEnvoy", () => {
  const dir = mkdtempSync(join(tmpdir(), "lastcall-identify-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const script = (name: string, body: string) => {
    const path = join(dir, name);
    writeFileSync(path, `#!/bin/sh\n${body}\n`);
    chmodSync(path, 0o755);
    return path;
  };

  it("answers Envoy's release for the real Envoy", async () => {
    expect(await identifyEnvoy(process.env.ENVOY_BIN!)).toMatch(/^1\.\d+\.\d+/);
  });

  it("refuses /bin/true, naming the path and what --version printed", async () => {
    await expect(identifyEnvoy("/bin/true")).rejects.toThrow(
      /^Envoy binary \/bin\/true is not Envoy: \/bin\/true --version printed /,
    );
  });

  it("refuses a script, quoting its first line and its exit", async () => {
    const path = script("fake-envoy", "echo 'usage: something else'\nexit 3");
    await expect(identifyEnvoy(path)).rejects.toThrow(
      `Envoy binary ${path} is not Envoy: ${path} --version printed "usage: something else" (exit 3)`,
    );
  });

  it("gives up on one that hangs, within the bound, and stops it with what it started", async () => {
    const pidFile = join(dir, "sleep.pid");
    const path = script("hung-envoy", `sleep 30 & echo $! > ${pidFile}; wait`);
    const started = Date.now();
    await expect(identifyEnvoy(path, { timeoutMs: 300 })).rejects.toThrow(
      `${path} --version did not answer within 300 ms`,
    );
    expect(Date.now() - started).toBeLessThan(5000);
    const sleeper = Number(readFileSync(pidFile, "utf8"));
    await waitFor(() => (running(sleeper) ? undefined : true), {
      what: "the wrapper's child to be stopped",
    });
  });
});
