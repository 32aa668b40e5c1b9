// Which processes and preStop commands are the native sidecar's drain hook: what `check` accepts,
// and what an app's hook waits for while it has not yet asked.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { drainHookRunning } from "../../agent/drain/app-stop.ts";
import { drainHookCommand, isDrainHook } from "../../agent/drain/hook.ts";

describe("isDrainHook", () => {
  it.each([
    [drainHookCommand(), true],
    [drainHookCommand(["--status-url", "http://127.0.0.1:15021"]), true],
    [["lastcall", "drain"], true],
    [["/usr/local/bin/lastcall", "drain", "--timeout", "3s"], true],
    [["/bin/sh", "-c", "kill -USR2 1"], true],
    [["lastcall", "run"], false],
    [["sh", "-c", "sleep 5"], false],
    [["sh", "kill -USR2 1"], false],
    [["python3", "-c", "kill -USR2 1"], false],
    [[], false],
  ])("%j: %s", (argv, expected) => {
    expect(isDrainHook(argv)).toBe(expected);
  });

  it("the fallback keeps `lastcall drain`'s arguments", () => {
    expect(drainHookCommand(["--status-url", "http://127.0.0.1:15021"])[2]).toContain(
      "else exec lastcall drain --status-url http://127.0.0.1:15021; fi",
    );
  });
});

describe("drainHookRunning", () => {
  let proc: string | undefined;
  afterEach(() => proc && rmSync(proc, { recursive: true, force: true }));

  /** A /proc with one process per command line. */
  function fakeProc(...commands: string[][]): string {
    proc = mkdtempSync(join(tmpdir(), "lastcall-test-proc-"));
    commands.forEach((argv, i) => {
      mkdirSync(join(proc!, String(100 + i)));
      writeFileSync(join(proc!, String(100 + i), "cmdline"), argv.map((a) => `${a}\0`).join(""));
    });
    mkdirSync(join(proc, "sys"));
    return proc;
  }

  it.each([
    { name: "inject's shell line", commands: [["lastcall", "run"], drainHookCommand()], is: true },
    { name: "lastcall drain", commands: [["lastcall", "run"], ["lastcall", "drain"]], is: true },
    { name: "a shell", commands: [["lastcall", "run"], ["sh", "-c", "sleep 1"]], is: false },
  ])("the agent and $name: $is", async ({ commands, is: expected }) => {
    expect(await drainHookRunning(fakeProc(...commands))).toBe(expected);
  });
});
