import { describe, expect, it } from "vitest";
import { envoyArgs, type EnvoyLaunch } from "../../agent/envoy/args.ts";

const launch = (overrides: Partial<EnvoyLaunch> = {}): EnvoyLaunch => ({
  configPath: "/run/envoy.yaml",
  concurrency: 2,
  epoch: 0,
  baseIdPath: "/run/base-id",
  hotRestart: true,
  adminAddressPath: "/run/admin",
  drainTimeMs: 5000,
  parentShutdownMs: 600_000,
  extraArgs: [],
  ...overrides,
});

/** The value following `flag`, or undefined. */
const valueOf = (
  args: string[],
  flag: string,
) => (args.includes(flag) ? args[args.indexOf(flag) + 1] : undefined);

describe("envoyArgs", () => {
  it("epoch 0 takes a dynamic base id and records it", () => {
    const args = envoyArgs(launch());
    expect(args).toContain("--use-dynamic-base-id");
    expect(valueOf(args, "--base-id-path")).toBe("/run/base-id");
    expect(args).not.toContain("--restart-epoch");
    expect(args).not.toContain("--base-id");
  });

  it("a later epoch reuses the recorded base id", () => {
    const args = envoyArgs(launch({ epoch: 3, baseId: 1234 }));
    expect(valueOf(args, "--base-id")).toBe("1234");
    expect(valueOf(args, "--restart-epoch")).toBe("3");
    expect(args).not.toContain("--use-dynamic-base-id");
  });

  it("a later epoch without a base id is refused", () => {
    expect(() => envoyArgs(launch({ epoch: 1 }))).toThrow(
      /Cannot start epoch 1: no base id recorded/,
    );
  });

  it("--no-hot-restart disables hot restart and uses no base id", () => {
    const args = envoyArgs(launch({ hotRestart: false }));
    expect(args).toContain("--disable-hot-restart");
    expect(args.filter((a) => a.includes("base-id") || a === "--restart-epoch")).toEqual([]);
  });

  it("passes config, concurrency, admin address path and the immediate drain strategy", () => {
    const args = envoyArgs(launch({ concurrency: 4 }));
    expect(valueOf(args, "-c")).toBe("/run/envoy.yaml");
    expect(valueOf(args, "--concurrency")).toBe("4");
    expect(valueOf(args, "--admin-address-path")).toBe("/run/admin");
    expect(valueOf(args, "--drain-strategy")).toBe("immediate");
  });

  it.each([
    [5000, "5"],
    [1500, "2"],
    [1, "1"],
    [0, "1"],
  ])("turns %i ms into --drain-time-s %s (whole seconds, at least 1)", (ms, seconds) => {
    expect(valueOf(envoyArgs(launch({ drainTimeMs: ms })), "--drain-time-s")).toBe(seconds);
  });

  it("sets Envoy's parent-shutdown timer a second past lastcall's limit for an old epoch", () => {
    expect(valueOf(envoyArgs(launch({ parentShutdownMs: 600_000 })), "--parent-shutdown-time-s"))
      .toBe("601");
    expect(valueOf(envoyArgs(launch({ parentShutdownMs: 1500 })), "--parent-shutdown-time-s")).toBe(
      "3",
    );
  });

  it("puts extra Envoy arguments last", () => {
    expect(envoyArgs(launch({ extraArgs: ["-l", "debug"] })).slice(-2)).toEqual(["-l", "debug"]);
  });
});
