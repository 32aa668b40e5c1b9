// The option table: duration and boolean parsing, and what boolean environment variables mean.
import { Command } from "commander";
import fc from "fast-check";
import { afterEach, describe, expect, it, vi } from "vitest";
import { resolveRunOptions } from "../../agent/commands/run.ts";
import {
  durationArg,
  parseBoolean,
  runOptionList,
  type RunOptions,
  strictBooleanEnvironment,
} from "../../agent/options.ts";

describe("parseBoolean", () => {
  it.each([
    ["true", true],
    ["TRUE", true],
    ["True", true],
    ["1", true],
    ["false", false],
    ["FALSE", false],
    ["0", false],
  ])("%j is %s", (value, meaning) => {
    expect(parseBoolean("LASTCALL_NO_FILTER", value)).toBe(meaning);
  });

  it.each([
    "garbage",
    "",
    "yes",
    "no",
    "on",
    "off",
    " true",
    "true ",
    "01",
    "2",
    "constructor",
    "__proto__",
  ])("refuses %j", (value) => {
    expect(() => parseBoolean("LASTCALL_NO_FILTER", value)).toThrow(
      new RangeError(
        `LASTCALL_NO_FILTER must be true, false, 1 or 0, not ${JSON.stringify(value)}`,
      ),
    );
  });

  it("accepts the four words in any case, and refuses every other string naming the variable and the value", () => {
    const words = fc.mixedCase(fc.constantFrom("true", "false", "1", "0"));
    fc.assert(fc.property(words, (value) => {
      expect(parseBoolean("X", value)).toBe(["true", "1"].includes(value.toLowerCase()));
    }));
    const other = fc.string({ unit: "grapheme" }).filter((s) =>
      !["true", "false", "1", "0"].includes(s.toLowerCase())
    );
    fc.assert(fc.property(other, (value) => {
      expect(() => parseBoolean("SOME_VAR", value)).toThrow(
        `SOME_VAR must be true, false, 1 or 0, not ${JSON.stringify(value)}`,
      );
    }));
  });
});

describe("durationArg", () => {
  it("refuses a duration a timer cannot hold, saying the limit", () => {
    expect(() => durationArg("99999999999999s")).toThrow(
      "Expected at most 2147483647ms, about 24.8 days",
    );
    expect(durationArg("2147483647ms")).toBe(2_147_483_647);
  });
});

/** Parses `lastcall run` arguments in-process with `env` as the environment. */
function runOptions(args: string[], env: Record<string, string> = {}): RunOptions {
  for (const [name, value] of Object.entries(env)) vi.stubEnv(name, value);
  const command = new Command("run").exitOverride().configureOutput({ writeErr: () => {} })
    .argument("[envoy-args...]");
  for (const opt of runOptionList()) command.addOption(opt);
  strictBooleanEnvironment(command, () => process.env);
  let options: RunOptions | undefined;
  command.action((envoyArgs: string[], _o, c: Command) => {
    options = resolveRunOptions(c, envoyArgs);
  });
  command.parse(["--config", "envoy.yaml", ...args], { from: "user" });
  return options!;
}

describe("boolean environment variables of lastcall run", () => {
  afterEach(() => vi.unstubAllEnvs());

  it.each([
    [{}, true],
    [{ LASTCALL_NO_FILTER: "true" }, false],
    [{ LASTCALL_NO_FILTER: "1" }, false],
    [{ LASTCALL_NO_FILTER: "false" }, true],
    [{ LASTCALL_NO_FILTER: "0" }, true],
    [{ LASTCALL_NO_FILTER: "FALSE" }, true],
  ])("%j: filter %s", (env, filter) => {
    expect(runOptions([], env).filter).toBe(filter);
  });

  it.each([
    [{ LASTCALL_NO_HOT_RESTART: "1" }, false],
    [{ LASTCALL_NO_HOT_RESTART: "0" }, true],
  ])("%j: hot restart %s", (env, hotRestart) => {
    expect(runOptions([], env).hotRestart).toBe(hotRestart);
  });

  it.each([
    [[], {}, false],
    [["--role", "gateway"], {}, true],
    [[], { LASTCALL_FAIL_HEALTHCHECK: "true" }, true],
    [[], { LASTCALL_FAIL_HEALTHCHECK: "false" }, false],
    [["--role", "gateway"], { LASTCALL_FAIL_HEALTHCHECK: "false" }, false],
    [["--role", "gateway"], { LASTCALL_NO_FAIL_HEALTHCHECK: "1" }, false],
    [["--role", "gateway"], { LASTCALL_NO_FAIL_HEALTHCHECK: "0" }, true],
    [[], { LASTCALL_NO_FAIL_HEALTHCHECK: "0" }, false],
    [[], { LASTCALL_FAIL_HEALTHCHECK: "1", LASTCALL_NO_FAIL_HEALTHCHECK: "0" }, true],
    [["--fail-healthcheck"], { LASTCALL_FAIL_HEALTHCHECK: "0" }, true],
  ])("%j with %j: fail healthcheck %s", (args, env, failHealthcheck) => {
    expect(runOptions(args, env).failHealthcheck).toBe(failHealthcheck);
  });

  it("--holder-paths: off by default, on by the flag or LASTCALL_HOLDER_PATHS", () => {
    expect(runOptions([], {}).holderPaths).toBe(false);
    expect(runOptions(["--holder-paths"], {}).holderPaths).toBe(true);
    expect(runOptions([], { LASTCALL_HOLDER_PATHS: "1" }).holderPaths).toBe(true);
    expect(runOptions([], { LASTCALL_HOLDER_PATHS: "false" }).holderPaths).toBe(false);
    expect(() => runOptions(["--redact-paths"], {})).toThrow(/redact-paths/);
  });

  it("a flag on the command line wins over its variable", () => {
    expect(runOptions(["--no-filter"], { LASTCALL_NO_FILTER: "false" }).filter).toBe(false);
  });

  it.each([
    "LASTCALL_NO_FILTER",
    "LASTCALL_NO_HOT_RESTART",
    "LASTCALL_FAIL_HEALTHCHECK",
    "LASTCALL_NO_FAIL_HEALTHCHECK",
    "LASTCALL_HOLDER_PATHS",
  ])(
    "%s=garbage is refused, also when the flag is given",
    (name) => {
      const message = `${name} must be true, false, 1 or 0, not "garbage"`;
      expect(() => runOptions([], { [name]: "garbage" })).toThrow(new RangeError(message));
      expect(() => runOptions(["--no-filter", "--fail-healthcheck"], { [name]: "garbage" }))
        .toThrow(new RangeError(message));
    },
  );

  it("refuses two variables that contradict each other", () => {
    expect(() =>
      runOptions([], { LASTCALL_FAIL_HEALTHCHECK: "true", LASTCALL_NO_FAIL_HEALTHCHECK: "1" })
    ).toThrow(
      new RangeError("LASTCALL_FAIL_HEALTHCHECK=true contradicts LASTCALL_NO_FAIL_HEALTHCHECK=1"),
    );
  });

  it("every boolean flag of lastcall run is covered", () => {
    const booleans = runOptionList().filter((o) => !o.required && !o.optional).map((o) => o.envVar);
    expect(booleans).toEqual([
      "LASTCALL_NO_HOT_RESTART",
      "LASTCALL_NO_FILTER",
      "LASTCALL_HOLDER_PATHS",
      "LASTCALL_FAIL_HEALTHCHECK",
      "LASTCALL_NO_FAIL_HEALTHCHECK",
    ]);
  });
});

describe("Istio's variables", () => {
  afterEach(() => {
    vi.unstubAllEnvs();
    vi.restoreAllMocks();
  });

  it.each([
    ["1", "connections"],
    ["TRUE", "connections"],
    ["0", "inflight"],
    ["false", "inflight"],
  ])("EXIT_ON_ZERO_ACTIVE_CONNECTIONS=%s: --drain-mode %s, logged when applied", (value, mode) => {
    const written: string[] = [];
    vi.spyOn(process.stdout, "write").mockImplementation((
      line,
    ) => (written.push(String(line)), true));
    expect(runOptions([], { EXIT_ON_ZERO_ACTIVE_CONNECTIONS: value }).drainMode).toBe(mode);
    const events = written.map((line) => JSON.parse(line)).filter((e) =>
      e.event === "istio_environment"
    );
    expect(events.map((e) => e.applied)).toEqual(
      mode === "connections" ? [["EXIT_ON_ZERO_ACTIVE_CONNECTIONS→--drain-mode connections"]] : [],
    );
  });

  it("EXIT_ON_ZERO_ACTIVE_CONNECTIONS=yes is refused", () => {
    expect(() => runOptions([], { EXIT_ON_ZERO_ACTIVE_CONNECTIONS: "yes" })).toThrow(
      new RangeError('EXIT_ON_ZERO_ACTIVE_CONNECTIONS must be true, false, 1 or 0, not "yes"'),
    );
  });

  it.each([
    ["TERMINATION_DRAIN_DURATION", "99999999999s"],
    ["TERMINATION_DRAIN_DURATION_SECONDS", "99999999999"],
    ["MINIMUM_DRAIN_DURATION", "9999999h"],
  ])("%s=%s is refused: longer than a timer can hold", (name, value) => {
    expect(() => runOptions(["--grace", "596h"], { [name]: value })).toThrow(
      `Invalid ${name}: "${value}" is longer than a timer can hold (2147483647ms, about 24.8 days)`,
    );
  });

  it("reads the durations as pilot-agent does (Go's spellings), and lastcall's", () => {
    expect(runOptions([], { MINIMUM_DRAIN_DURATION: "10s500ms" }).minDrainMs).toBe(10_500);
    expect(runOptions([], { TERMINATION_DRAIN_DURATION_SECONDS: "20" }).terminationDrainMs).toBe(
      20_000,
    );
  });

  it("names TERMINATION_DRAIN_DURATION_SECONDS when that is the variable used", () => {
    expect(() => runOptions([], { TERMINATION_DRAIN_DURATION_SECONDS: "soon" })).toThrow(
      'Invalid TERMINATION_DRAIN_DURATION_SECONDS: "soon"',
    );
  });
});

describe("removed options", () => {
  it("--zero-confirm is gone", () => {
    expect(runOptionList().map((o) => o.long)).not.toContain("--zero-confirm");
    expect(() => runOptions(["--zero-confirm", "50ms"])).toThrow("unknown option '--zero-confirm'");
  });
});
