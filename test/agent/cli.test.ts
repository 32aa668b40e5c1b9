// The command-line contract, option values: bad ones are refused at start with one line naming
// the flag and the value, and exit 2. Configs, --help and --version: cli-config.test.ts.
import { describe, expect, it } from "vitest";
import { errorLines, lastcall, run, someConfig } from "./cli-run.ts";

/** A bad value, given by flag or environment, and what the one error line must name. */
type BadValue = {
  name: string;
  args: string[];
  env: Record<string, string>;
  flag: string;
  value: string;
};

describe("bad option values exit 2 with one line naming the flag and the value", () => {
  it.each<BadValue>([
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
  it.each<BadValue>([
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

describe("lastcall exec with an empty command", () => {
  it("exec -- '': one line, exit 2, nothing waited for", async () => {
    const result = await lastcall(["exec", "--", ""]);
    expect(result).toMatchObject({ code: 2, stdout: "" });
    expect(result.stderr).toBe(
      "lastcall exec: no command given (usage: lastcall exec [options] -- CMD ARGS...)\n",
    );
  });
});
