// The command-line contract: bad values and bad configs are refused at start with one
// line naming what is wrong and exit 2; --help and --version answer and exit 0.
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  inboundConfig,
  lastcallCommand,
  startLastcall,
  stopAllLastcalls,
  writeConfig,
} from "../support/lastcall.ts";
import type { Json } from "../support/json.ts";

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `lastcall <args>` to its end (ports 0 for `run`, so nothing collides). */
function lastcall(args: string[], env: Record<string, string> = {}): Promise<Result> {
  const [command, ...prefix] = lastcallCommand();
  return new Promise((resolve) => {
    execFile(
      command,
      [...prefix, ...args],
      { timeout: 30_000, env: { ...process.env, ...env } },
      (error, stdout, stderr) => {
        resolve({ code: error ? (error as { code?: number }).code ?? null : 0, stdout, stderr });
      },
    );
  });
}

const run = (...args: string[]) => ["run", "--admin-port", "0", "--status-port", "0", ...args];
const someConfig = () => writeConfig(inboundConfig({ upstreamPort: 9 }));

/** The stderr lines that say what is wrong (commander adds a hint line after its own errors). */
const errorLines = (stderr: string) =>
  stderr.split("\n").filter((l) => l && l !== "(run with --help for usage)");

describe("bad option values exit 2 with one line naming the flag and the value", () => {
  it.each([
    { name: "--grace abc", args: ["--grace", "abc"], env: {}, flag: "--grace", value: "abc" },
    {
      name: "--admin-port 70000",
      args: ["--admin-port", "70000"],
      env: {},
      flag: "--admin-port",
      value: "70000",
    },
    {
      name: "--concurrency 0",
      args: ["--concurrency", "0"],
      env: {},
      flag: "--concurrency",
      value: "0",
    },
    {
      name: "--restart-budget -1",
      args: ["--restart-budget=-1"],
      env: {},
      flag: "--restart-budget",
      value: "-1",
    },
    {
      name: "--drain-time 5 parsecs",
      args: ["--drain-time", "5 parsecs"],
      env: {},
      flag: "--drain-time",
      value: "5 parsecs",
    },
    {
      name: "--log-format xml",
      args: ["--log-format", "xml"],
      env: {},
      flag: "--log-format",
      value: "xml",
    },
    {
      name: "LASTCALL_CONCURRENCY=x",
      args: [],
      env: { LASTCALL_CONCURRENCY: "x" },
      flag: "LASTCALL_CONCURRENCY",
      value: "x",
    },
    {
      name: "LASTCALL_GRACE=soon",
      args: [],
      env: { LASTCALL_GRACE: "soon" },
      flag: "LASTCALL_GRACE",
      value: "soon",
    },
  ])("$name", async ({ args, env, flag, value }) => {
    const result = await lastcall([...run("--config", "/nonexistent.yaml"), ...args], env);
    expect(result.code).toBe(2);
    const lines = errorLines(result.stderr);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(flag);
    expect(lines[0]).toContain(`'${value}'`);
    expect(result.stdout).toBe("");
  });

  it("refuses an unknown flag", async () => {
    const result = await lastcall(run("--config", "x.yaml", "--bogus"));
    expect(result.code).toBe(2);
    expect(errorLines(result.stderr)).toEqual(["error: unknown option '--bogus'"]);
  });

  it("refuses a missing --config", async () => {
    const result = await lastcall(run());
    expect(result.code).toBe(2);
    expect(errorLines(result.stderr)).toEqual([
      "error: required option '-c, --config <file>' not specified",
    ]);
  });
});

describe("durations a timer cannot hold are refused at start", () => {
  // Above 2^31 − 1 ms setTimeout fires at once: --grace 99999999999999s would mean a hard stop.
  it.each([
    {
      name: "--grace 99999999999999s",
      args: run("--config", "/nonexistent.yaml", "--grace", "99999999999999s"),
      env: {},
      flag: "--grace",
      value: "99999999999999s",
    },
    {
      name: "LASTCALL_GRACE",
      args: run("--config", "/nonexistent.yaml"),
      env: { LASTCALL_GRACE: "99999999999999s" },
      flag: "LASTCALL_GRACE",
      value: "99999999999999s",
    },
    {
      name: "--stop-margin 2147483648ms",
      args: run("--config", "/nonexistent.yaml", "--stop-margin", "2147483648ms"),
      env: {},
      flag: "--stop-margin",
      value: "2147483648ms",
    },
    {
      name: "--heartbeat 597h",
      args: run("--config", "/nonexistent.yaml", "--heartbeat", "597h"),
      env: {},
      flag: "--heartbeat",
      value: "597h",
    },
    {
      name: "wait --timeout",
      args: ["wait", "--timeout", "9999999h"],
      env: {},
      flag: "--timeout",
      value: "9999999h",
    },
    {
      name: "exec --timeout",
      args: ["exec", "--timeout", "9999999h", "--", "true"],
      env: {},
      flag: "--timeout",
      value: "9999999h",
    },
    {
      name: "shutdown --check-interval",
      args: ["shutdown", "--check-interval", "9999999h"],
      env: {},
      flag: "--check-interval",
      value: "9999999h",
    },
    {
      name: "bootstrap --heartbeat",
      args: ["bootstrap", "--config", "/nonexistent.yaml", "--heartbeat", "9999999h"],
      env: {},
      flag: "--heartbeat",
      value: "9999999h",
    },
  ])("$name", async ({ args, env, flag, value }) => {
    const result = await lastcall(args, env);
    expect(result).toMatchObject({ code: 2, stdout: "" });
    const lines = errorLines(result.stderr);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(flag);
    expect(lines[0]).toContain(`'${value}'`);
    expect(lines[0]).toContain("at most 2147483647ms");
  });

  it.each([
    ["TERMINATION_DRAIN_DURATION", "99999999999999s"],
    ["TERMINATION_DRAIN_DURATION_SECONDS", "99999999999999"],
    ["MINIMUM_DRAIN_DURATION", "597h"],
  ])("Istio's %s=%s", async (name, value) => {
    const result = await lastcall(run("--config", "/nonexistent.yaml", "--grace", "596h"), {
      [name]: value,
    });
    expect(result).toMatchObject({ code: 2, stdout: "" });
    expect(errorLines(result.stderr)).toEqual([
      `lastcall: Invalid ${name}: "${value}" is longer than a timer can hold (2147483647ms, about 24.8 days)`,
    ]);
  });

  it("accepts exactly 2^31 − 1 ms (and goes on to read the config)", async () => {
    const result = await lastcall(
      run("--config", "/nonexistent/envoy.yaml", "--grace", "2147483647ms"),
    );
    expect(result.code).toBe(2);
    expect(errorLines(result.stderr)[0]).toMatch(
      /^lastcall: Cannot read Envoy config \/nonexistent\/envoy.yaml/,
    );
  });
});

describe("boolean environment variables accept only true, false, 1 or 0", () => {
  const notReady = ["--timeout", "1s", "--status-url", "http://127.0.0.1:9/healthz/ready"];
  it.each([
    { name: "LASTCALL_NO_FILTER", command: "run", args: run("--config", "/nonexistent.yaml") },
    { name: "LASTCALL_NO_HOT_RESTART", command: "run", args: run("--config", "/nonexistent.yaml") },
    {
      name: "LASTCALL_FAIL_HEALTHCHECK",
      command: "run",
      args: run("--config", "/nonexistent.yaml"),
    },
    {
      name: "LASTCALL_NO_FAIL_HEALTHCHECK",
      command: "run",
      args: run("--config", "/nonexistent.yaml"),
    },
    {
      name: "EXIT_ON_ZERO_ACTIVE_CONNECTIONS",
      command: "run",
      args: run("--config", "/nonexistent.yaml"),
    },
    { name: "LASTCALL_NO_QUIT", command: "exec", args: ["exec", ...notReady, "--", "true"] },
    {
      name: "LASTCALL_NO_FILTER",
      command: "bootstrap",
      args: ["bootstrap", "--config", "/nonexistent.yaml"],
    },
  ])("$command: $name=garbage", async ({ name, args }) => {
    const result = await lastcall(args, { [name]: "garbage" });
    expect(result).toMatchObject({ code: 2, stdout: "" });
    expect(errorLines(result.stderr)).toEqual([
      `lastcall: ${name} must be true, false, 1 or 0, not "garbage"`,
    ]);
  });

  it.each([
    ["true", false],
    ["1", false],
    ["false", true],
    ["0", true],
    ["FALSE", true],
  ])("LASTCALL_NO_FILTER=%s: filter inserted %s", async (value, inserted) => {
    const result = await lastcall(["bootstrap", "--config", someConfig()], {
      LASTCALL_NO_FILTER: value,
    });
    expect(result).toMatchObject({ code: 0, stderr: "" });
    expect(result.stdout.includes("envoy.extensions.filters.http.wasm.v3.Wasm")).toBe(inserted);
  });
});

describe("contradictory timings are refused with the numbers", () => {
  it.each([
    {
      args: ["--min-drain", "30s", "--grace", "30s"],
      line: "lastcall: --min-drain 30s must be shorter than --grace 30s minus --stop-margin 2s",
    },
    {
      args: ["--stop-margin", "5s", "--grace", "5s"],
      line: "lastcall: --stop-margin 5s leaves no time within --grace 5s",
    },
    {
      args: ["--drain-delay", "3s", "--min-drain", "2s"],
      line:
        "lastcall: --drain-delay 3s must be shorter than --min-drain 2s: the drain could end before Envoy's listeners start draining",
    },
    {
      args: ["--min-drain", "12s", "--drain-time", "5s"],
      line:
        "lastcall: --drain-time 5s closes Envoy's listeners before --min-drain 12s ends: set --drain-time to at least 12s",
    },
  ])("$args", async ({ args, line }) => {
    const result = await lastcall(run("--config", someConfig(), ...args));
    expect(result).toMatchObject({ code: 2, stdout: "" });
    expect(errorLines(result.stderr)).toEqual([line]);
  });
});

describe("configs lastcall cannot run exit 2 before Envoy starts", () => {
  it("a missing config file", async () => {
    const result = await lastcall(run("--config", "/nonexistent/envoy.yaml"));
    expect(result.code).toBe(2);
    expect(errorLines(result.stderr)).toEqual([
      "lastcall: Cannot read Envoy config /nonexistent/envoy.yaml: ENOENT: no such file or directory, open '/nonexistent/envoy.yaml'",
    ]);
    expect(result.stdout).not.toContain('"event":"start"');
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
    expect(await lastcall(["--version"])).toEqual({ code: 0, stdout: `${version}\n`, stderr: "" });
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
