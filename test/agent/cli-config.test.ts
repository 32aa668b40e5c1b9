// The command-line contract, configs and help: configs lastcall cannot run are refused before
// Envoy starts (one line, exit 2); bootstrap reads options as run does; --help and --version
// answer and exit 0; boolean flags come from the environment too.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { errorLines, lastcall, run, someConfig } from "./cli-run.ts";
import {
  inboundConfig,
  startLastcall,
  stopAllLastcalls,
  writeConfig,
} from "../support/lastcall.ts";
import type { Json } from "../support/json.ts";

describe("configs lastcall cannot run exit 2 before Envoy starts", () => {
  it("a missing config file", async () => {
    const result = await lastcall(run("--config", "/nonexistent/envoy.yaml"));
    expect(result.code).toBe(2);
    expect(errorLines(result.stderr)).toEqual([
      "lastcall: Cannot read Envoy config /nonexistent/envoy.yaml: ENOENT: no such file or directory, open '/nonexistent/envoy.yaml'",
    ]);
    expect(result.stdout).not.toContain('"event":"start"');
  });

  it("a FIFO no one writes to: refused at once instead of a read that blocks even SIGTERM", async () => {
    const dir = mkdtempSync(join(tmpdir(), "lastcall-cli-"));
    const path = join(dir, "envoy.yaml");
    execFileSync("mkfifo", [path]);
    const result = await lastcall(run("--config", path));
    expect(result.code).toBe(2);
    expect(errorLines(result.stderr)).toEqual([
      `lastcall: Cannot read Envoy config ${path}: a FIFO (named pipe), not a regular file: lastcall reads its config again on reloads`,
    ]);
    const folder = await lastcall(run("--config", dir));
    expect(folder.code).toBe(2);
    expect(errorLines(folder.stderr)).toEqual([
      `lastcall: Cannot read Envoy config ${dir}: a folder, not a regular file: lastcall reads its config again on reloads`,
    ]);
  });

  it("a --run-dir that cannot be made under a parent refusing it (/proc): one line, not a hang", async () => {
    const result = await lastcall(run("--config", someConfig(), "--run-dir", "/proc/lastcall/run"));
    expect(result.code).toBe(2);
    expect(errorLines(result.stderr)).toEqual([
      "lastcall: Cannot use --run-dir /proc/lastcall/run: ENOENT: no such file or directory, mkdir '/proc/lastcall'",
    ]);
  });

  it("a config that is not YAML", async () => {
    const path = writeConfig({});
    const { writeFileSync } = await import("node:fs");
    writeFileSync(path, "static_resources:\n  clusters: [ {name: a\n");
    const result = await lastcall(run("--config", path));
    expect(result.code).toBe(2);
    expect(errorLines(result.stderr)[0]).toMatch(
      new RegExp(`^lastcall: Cannot read Envoy config ${path}: `),
    );
  });

  it("a config Envoy rejects, with Envoy's own error lines", async () => {
    const config = inboundConfig({ upstreamPort: 9 }) as Json;
    config.static_resources.listeners[0].filter_chains[0].filters[0].typed_config.route_config
      .virtual_hosts[0].routes[0].route.cluster = "no_such_cluster";
    const path = writeConfig(config);
    const result = await lastcall(run("--config", path));
    expect(result.code).toBe(2);
    const lines = errorLines(result.stderr);
    expect(lines[0]).toBe(`lastcall: Envoy rejected config ${path}`);
    expect(lines.length).toBeGreaterThan(1);
    // Envoy's own words, indented under lastcall's line.
    expect(lines.slice(1).join("\n")).toMatch(/^ {2}.*no_such_cluster/m);
    expect(result.stdout).not.toContain('"event":"start"');
    // Envoy starts at once, its own output held; gone before LIVE, the validation explains:
    // stderr is lastcall's line and Envoy's lines quoted under it, nothing else.
    const raw = result.stderr.split("\n").filter(Boolean);
    expect(raw.filter((l) => !l.startsWith("lastcall: ") && !l.startsWith("  "))).toEqual([]);
  });

  it.each([
    [["--bogus-flag"], /PARSE ERROR: Argument: --bogus-flag/],
    [["-l", "bogus"], /invalid log level specified 'bogus'/],
  ])("an Envoy argument Envoy refuses (-- %j): one line naming it, Envoy's words, exit 2", async (
    args,
    words,
  ) => {
    const path = writeConfig(inboundConfig({ upstreamPort: 9 }));
    const result = await lastcall(run("--config", path, "--", ...args));
    expect(result.code).toBe(2);
    const lines = errorLines(result.stderr);
    expect(lines[0]).toBe(
      `lastcall: Envoy refused the arguments after --: ${args.join(" ")}`,
    );
    expect(lines.slice(1).join("\n")).toMatch(words);
  });

  it.each([
    [
      ["--filter-wasm", "/nonexistent.wasm"],
      "lastcall: Filter module not found: /nonexistent.wasm",
    ],
    [
      ["--watch", "/nonexistent/envoy.yaml"],
      "lastcall: Cannot watch /nonexistent/envoy.yaml: no folder /nonexistent",
    ],
    [["--envoy", "/tmp"], "lastcall: Envoy binary from --envoy is not executable: /tmp"],
  ])("%j: one line, exit 2", async (args, line) => {
    const result = await lastcall(
      run("--config", writeConfig(inboundConfig({ upstreamPort: 9 })), ...args),
    );
    expect(result.code).toBe(2);
    expect(errorLines(result.stderr)).toEqual([line]);
  });

  it("a status port already in use", async () => {
    const { createServer } = await import("node:net");
    const taken = createServer();
    await new Promise<void>((done) => taken.listen(0, "127.0.0.1", done));
    try {
      const port = (taken.address() as { port: number }).port;
      const result = await lastcall(run("--config", someConfig(), "--status-port", String(port)));
      expect(result.code).toBe(2);
      expect(errorLines(result.stderr)).toEqual([
        `lastcall: Cannot listen on 127.0.0.1:${port}: listen EADDRINUSE: address already in use 127.0.0.1:${port}`,
      ]);
    } finally {
      taken.close();
    }
  });

  it("an admin address that is not loopback", async () => {
    const config = {
      ...inboundConfig({ upstreamPort: 9 }),
      admin: { address: { socket_address: { address: "0.0.0.0", port_value: 0 } } },
    };
    const path = writeConfig(config);
    const result = await lastcall(run("--config", path));
    expect(result.code).toBe(2);
    expect(errorLines(result.stderr)).toEqual([
      `lastcall: Cannot use Envoy config ${path}: Envoy config admin address must be loopback, not 0.0.0.0`,
    ]);
  });
});

describe("bootstrap reads options as run does", () => {
  it("refuses a config that is not YAML in one line, exit 2", async () => {
    const dir = mkdtempSync(join(tmpdir(), "lastcall-cli-"));
    const path = join(dir, "bad.yaml");
    writeFileSync(path, "static_resources: [\n");
    const result = await lastcall(["bootstrap", "--config", path]);
    expect(result.code).toBe(2);
    expect(result.stderr.trim().split("\n")).toHaveLength(1);
    expect(result.stderr).toMatch(new RegExp(`^lastcall: Cannot read Envoy config ${path}: `));
  });

  it("LASTCALL_EXCLUDE_PATH holds a comma-separated list", async () => {
    const result = await lastcall(["bootstrap", "--config", someConfig()], {
      LASTCALL_EXCLUDE_PATH: "/healthz,/metrics",
    });
    expect(result).toMatchObject({ code: 0, stderr: "" });
    // The bootstrap is printed as JSON; the plugin configuration is a JSON string inside it.
    const values: string[] = [];
    JSON.parse(
      result.stdout,
      (key, value) => (key === "value" && typeof value === "string" && values.push(value), value),
    );
    const plugin = values.map((v) => JSON.parse(v)).find((v) => "exclude_paths" in v);
    expect(plugin.exclude_paths).toEqual(["/healthz", "/metrics"]);
  });
});

describe("help and version", () => {
  it("run --help lists every flag with its environment variable and exits 0", async () => {
    const result = await lastcall(["run", "--help"]);
    expect(result.code).toBe(0);
    for (
      const flag of [
        "--config",
        "--envoy",
        "--admin-port",
        "--status-port",
        "--status-address",
        "--concurrency",
        "--watch",
        "--no-hot-restart",
        "--restart-budget",
        "--log-format",
        "--drain-time",
        "--parent-shutdown",
        "--grace",
      ]
    ) {
      expect(result.stdout).toContain(flag);
    }
    expect(result.stdout).toContain("LASTCALL_ADMIN_PORT");
    expect(result.stdout).toContain("LASTCALL_RESTART_BUDGET");
  });

  it("run --help tells the truth about what changed: no --zero-confirm, the limits, loopback-only control", async () => {
    const help = (await lastcall(["run", "--help"])).stdout.replace(/\s+/g, " ");
    expect(help).not.toContain("zero-confirm");
    expect(help).toContain("at most 2147483647ms, about 24.8 days");
    expect(help).toContain("boolean ones take true, false, 1 or 0");
    expect(help).toContain("POST /quitquitquit and /drain still answer loopback only");
    expect(help).toContain("Envoy --drain-time-s, rounded up to whole seconds");
  });

  it("--zero-confirm is gone", async () => {
    const result = await lastcall(run("--config", "x.yaml", "--zero-confirm", "50ms"));
    expect(result.code).toBe(2);
    expect(errorLines(result.stderr)).toEqual(["error: unknown option '--zero-confirm'"]);
  });

  it("--help lists the commands and exits 0", async () => {
    const result = await lastcall(["--help"]);
    expect(result.code).toBe(0);
    for (const command of ["run", "wait", "bootstrap"]) {
      expect(result.stdout).toMatch(new RegExp(`^ {2}${command}\\b`, "m"));
    }
  });

  it("--version prints the version and exits 0", async () => {
    const { version } = JSON.parse(
      await (await import("node:fs/promises")).readFile(
        new URL("../../package.json", import.meta.url),
        "utf8",
      ),
    );
    expect(await lastcall(["--version"])).toMatchObject({
      code: 0,
      stdout: `${version}\n`,
      stderr: "",
    });
  });
});

describe("boolean flags from the environment", () => {
  it.each([
    ["1", true],
    ["false", false],
  ])("LASTCALL_NO_HOT_RESTART=%s disables hot restart: %s", async (value, disabled) => {
    const lc = startLastcall(inboundConfig({ upstreamPort: 9 }), {
      env: { LASTCALL_NO_HOT_RESTART: value },
      args: ["--min-drain", "0s"],
    });
    try {
      const start = await lc.event("start");
      const envoyArgs = readFileSync(`/proc/${start.pid}/cmdline`, "utf8").split("\0");
      expect(envoyArgs.includes("--disable-hot-restart")).toBe(disabled);
    } finally {
      await stopAllLastcalls();
    }
  });
});
