// What lastcall prints arrives whole through a pipe read slowly (a pipe takes 64 KiB at a time),
// byte for byte as written to a file; a reader that goes away ends it quietly, non-zero.
import { spawn } from "node:child_process";
import { closeSync, openSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { inboundConfig, lastcallCommand, type Runtime, writeConfig } from "../support/lastcall.ts";
import { tempDir } from "../support/temp.ts";

interface Exit {
  code: number | null;
  stderr: string;
}

/** Runs lastcall with its standard output to `stdout` (a file descriptor, or a pipe). */
function lastcall(runtime: Runtime, args: string[], stdout: number | "pipe") {
  const [command, ...prefix] = lastcallCommand(runtime);
  const child = spawn(command, [...prefix, ...args], { stdio: ["ignore", stdout, "pipe"] });
  let stderr = "";
  child.stderr!.setEncoding("utf8").on("data", (s: string) => (stderr += s));
  const exited = new Promise<Exit>((resolve) =>
    child.on("close", (code) => resolve({ code, stderr }))
  );
  return { child, exited };
}

/** The bytes lastcall writes to a file, and its exit. */
async function toFile(runtime: Runtime, args: string[]): Promise<{ bytes: Buffer; exit: Exit }> {
  const path = join(tempDir("lastcall-out-"), "out");
  const fd = openSync(path, "w");
  const { exited } = lastcall(runtime, args, fd);
  closeSync(fd);
  const exit = await exited;
  expect(exit.code).toBe(0);
  return { bytes: readFileSync(path), exit };
}

/** What lastcall writes to a pipe read 16 KiB at a time, a pause after each read, and its exit. */
async function toSlowPipe(
  runtime: Runtime,
  args: string[],
): Promise<{ bytes: Buffer; exit: Exit }> {
  const { child, exited } = lastcall(runtime, args, "pipe");
  const chunks: Buffer[] = [];
  const stdout = child.stdout!;
  // Node resumes (and so discards) a child's unread output once the child exits, unless the
  // stream has a 'readable' listener: lastcall may rightly exit with its tail in the socket.
  stdout.on("readable", () => {});
  const ended = new Promise((resolve) => stdout.once("end", resolve));
  let done = false;
  void ended.then(() => (done = true));
  while (!done) {
    const chunk = stdout.read(16_384) ?? stdout.read();
    if (chunk) chunks.push(chunk);
    await delay(chunk ? 5 : 1);
  }
  return { bytes: Buffer.concat(chunks), exit: await exited };
}

/** Runs `args` to a file, then to a slowly read pipe: the same bytes and lines both times. */
async function samePiped(runtime: Runtime, args: string[], minBytes: number): Promise<void> {
  const file = await toFile(runtime, args);
  expect(file.bytes.length).toBeGreaterThan(minBytes);
  const piped = await toSlowPipe(runtime, args);
  expect(piped.exit).toEqual(file.exit);
  expect(piped.bytes.equals(file.bytes)).toBe(true);
}

/** A manifest of `count` Deployments, each with a Service. */
function bigManifest(count: number): string {
  const path = join(tempDir("lastcall-big-"), "apps.yaml");
  const docs = Array.from({ length: count }, (_, i) =>
    `apiVersion: apps/v1
kind: Deployment
metadata:
  name: app-${i}
spec:
  selector:
    matchLabels: {app: app-${i}}
  template:
    metadata:
      labels: {app: app-${i}}
    spec:
      containers:
      - name: app
        image: example/app:1
        ports:
        - containerPort: 8080
`);
  writeFileSync(path, docs.join("---\n"));
  return path;
}

/** An Envoy config of `count` listeners: its bootstrap is far beyond a pipe's 64 KiB. */
function manyListeners(count: number): string {
  const one = inboundConfig({ upstreamPort: 9 }) as {
    static_resources: { listeners: Array<{ name: string }> };
  };
  const [listener] = one.static_resources.listeners;
  one.static_resources.listeners = Array.from(
    { length: count },
    (_, i) => ({ ...listener, name: `in-${i}` }),
  );
  return writeConfig(one);
}

describe("output through a slowly read pipe is whole", () => {
  const manifest = bigManifest(600);

  it.each<Runtime>(["bundle", "deno"])(
    "inject, %s: 600 Deployments, byte-identical to a file",
    async (runtime) => {
      await samePiped(runtime, ["inject", "-f", manifest], 600_000);
    },
  );

  it("check: byte-identical to a file", async () => {
    await samePiped("bundle", ["check", "-f", bigManifest(1500)], 65_536);
  });

  it.each<Runtime>(["bundle", "binary", "deno"])(
    "bootstrap, %s: megabytes, byte-identical to a file",
    async (runtime) => {
      await samePiped(runtime, ["bootstrap", "--config", manyListeners(200)], 5_000_000);
    },
  );
});

describe("a reader that goes away", () => {
  it.each<Runtime>(["bundle", "deno"])(
    "ends %s quietly with 141, as SIGPIPE would",
    async (runtime) => {
      const { child, exited } = lastcall(runtime, ["inject", "-f", bigManifest(600)], "pipe");
      child.stdout!.once("data", () => child.stdout!.destroy());
      const exit = await exited;
      expect(exit.code).toBe(141);
      // Quietly: what it says is its usual lines, no broken-pipe error.
      expect(exit.stderr).not.toMatch(/EPIPE|Error/);
    },
  );
});

describe("output that cannot be written", () => {
  it.each<Runtime>(["bundle", "deno"])(
    "ends %s with 1 and one line naming why: a full disk is no closed pipe",
    async (runtime) => {
      const full = openSync("/dev/full", "w");
      const { exited } = lastcall(runtime, ["inject", "-f", bigManifest(20)], full);
      closeSync(full);
      const exit = await exited;
      expect(exit.code).toBe(1);
      expect(exit.stderr.trimEnd().split("\n").at(-1)).toBe(
        "lastcall: cannot write standard output (ENOSPC): what it printed is incomplete",
      );
    },
  );
});
