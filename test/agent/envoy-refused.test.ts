// An Envoy argument after `--` that clashes with lastcall's own (before any Envoy starts), or an
// `--envoy` that is not Envoy (once its start failed), is refused: one line naming the value, exit 2.
import { execFile } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { inboundConfig, lastcallCommand, startLastcall, writeConfig } from "../support/lastcall.ts";

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

const dir = mkdtempSync(join(tmpdir(), "lastcall-refused-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const config = writeConfig(inboundConfig({ upstreamPort: 9 }), dir);

/** Runs `lastcall run` (ports 0) with `args` before `--` and `envoyArgs` after, to its end. */
function run(
  args: string[],
  envoyArgs: string[] = [],
  env: Record<string, string> = {},
): Promise<Result> {
  const [command, ...prefix] = lastcallCommand();
  const all = [
    ...prefix,
    "run",
    "--config",
    config,
    "--admin-port",
    "0",
    "--status-port",
    "0",
    ...args,
    "--",
    ...envoyArgs,
  ];
  const started = Date.now();
  return new Promise((resolve) => {
    execFile(
      command,
      all,
      { timeout: 30_000, env: { ...process.env, ...env } },
      (error, stdout, stderr) => {
        resolve({
          code: error ? (error as { code?: number }).code ?? null : 0,
          stdout,
          stderr,
          ms: Date.now() - started,
        });
      },
    );
  });
}

const lines = (stderr: string) => stderr.split("\n").filter(Boolean);

describe("an Envoy argument that clashes with lastcall's own is refused at start", () => {
  it.each([
    {
      args: ["--concurrency", "4"],
      line:
        "lastcall: Envoy argument --concurrency clashes with lastcall's own: use lastcall's --concurrency",
    },
    {
      args: ["--concurrency=4"],
      line:
        "lastcall: Envoy argument --concurrency=4 clashes with lastcall's own: use lastcall's --concurrency",
    },
    {
      args: ["-l", "warning", "-c", "/etc/envoy.yaml"],
      line: "lastcall: Envoy argument -c clashes with lastcall's own: use lastcall's --config",
    },
    {
      args: ["--drain-time-s", "3"],
      line:
        "lastcall: Envoy argument --drain-time-s clashes with lastcall's own: use lastcall's --drain-time",
    },
    {
      args: ["--parent-shutdown-time-s=20"],
      line:
        "lastcall: Envoy argument --parent-shutdown-time-s=20 clashes with lastcall's own: lastcall derives it from its own limit for the old Envoy of a reload (use lastcall's --parent-shutdown)",
    },
    {
      args: ["--base-id", "7"],
      line:
        "lastcall: Envoy argument --base-id clashes with lastcall's own: lastcall runs Envoy's hot restart itself (use --no-hot-restart to do without)",
    },
  ])("-- $args", async ({ args, line }) => {
    const result = await run([], args);
    expect(result).toMatchObject({ code: 2, stdout: "" });
    expect(lines(result.stderr)).toEqual([line]);
    expect(result.ms).toBeLessThan(5000);
  });
});

describe("an --envoy that is not Envoy is refused at start", () => {
  it("/bin/true: names the path and what --version printed", async () => {
    const result = await run(["--envoy", "/bin/true"]);
    expect(result).toMatchObject({ code: 2, stdout: "" });
    expect(lines(result.stderr)).toHaveLength(1);
    expect(lines(result.stderr)[0]).toMatch(
      /^lastcall: Envoy binary \/bin\/true is not Envoy: \/bin\/true --version printed /,
    );
    expect(result.ms).toBeLessThan(5000);
  });

  it("a wrapper script that is not Envoy, via ENVOY_BIN as well", async () => {
    const script = join(dir, "envoy");
    writeFileSync(script, '#!/bin/sh\necho "not envoy: $*"\n');
    chmodSync(script, 0o755);
    const line =
      `lastcall: Envoy binary ${script} is not Envoy: ${script} --version printed "not envoy: --version"`;
    for (
      const result of [await run(["--envoy", script]), await run([], [], { ENVOY_BIN: script })]
    ) {
      // `--version` is asked once the start failed: the binary first ran with Envoy's arguments
      // (its standard output is the user's, passed through), then exited before LIVE.
      expect(result).toMatchObject({ code: 2, stdout: expect.stringMatching(/^not envoy: -c /) });
      expect(lines(result.stderr)).toEqual([line]);
    }
  });

  it("a wrapper that is not Envoy and hangs on everything but --version: refused, nothing left running", async () => {
    // Started with Envoy's arguments, it never goes LIVE: after a second the start is checked
    // (`--version` first), and nothing it started outlives lastcall.
    const script = join(dir, "hangs");
    const marker = `sleep ${60_000 + (process.pid % 1000)}`;
    writeFileSync(
      script,
      `#!/bin/sh\n[ "$1" = --version ] && { echo "not envoy"; exit 0; }\nexec ${marker}\n`,
    );
    chmodSync(script, 0o755);
    const result = await run(["--envoy", script]);
    expect(result).toMatchObject({ code: 2, stdout: "" });
    expect(lines(result.stderr)).toEqual([
      `lastcall: Envoy binary ${script} is not Envoy: ${script} --version printed "not envoy"`,
    ]);
    const left = await new Promise<string>((done) =>
      execFile("pgrep", ["-f", marker], (_e, out) => done(out.trim()))
    );
    expect(left).toBe("");
  });

  it("the real Envoy serves without being asked --version (the default path)", async () => {
    // A start that goes LIVE runs no second Envoy beside it: the wrapper logs every run's arguments.
    const calls = join(dir, "calls");
    const script = join(dir, "envoy-logged");
    writeFileSync(
      script,
      `#!/bin/sh
echo "$*" >>${calls}
exec ${process.env.ENVOY_BIN} "$@"
`,
    );
    chmodSync(script, 0o755);
    const lc = startLastcall(config, { env: { ENVOY_BIN: script } });
    try {
      expect(await lc.event("ready")).toMatchObject({ epoch: 0 });
      const runs = readFileSync(calls, "utf8").trim().split("\n");
      expect(runs).toHaveLength(1);
      expect(runs[0]).toMatch(/^-c /);
    } finally {
      await lc.stop();
    }
  });
});
