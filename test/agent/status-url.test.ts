// `wait`, `drain`, `status` and `exec` read `--status-url` the same way, and every failure names
// the URL asked.
import { spawn } from "node:child_process";
import { createServer, type Server } from "node:http";
import fc from "fast-check";
import { afterEach, describe, expect, it } from "vitest";
import { freePort, inboundConfig, lastcallCommand, startLastcall } from "../support/lastcall.ts";
import { upstreamForFile } from "../support/serving.ts";

const app = upstreamForFile();

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `lastcall ARGS...` (the bundle) to its end, with LASTCALL_STATUS_URL from `env` only. */
function lastcall(args: string[], env: Record<string, string> = {}): Promise<Result> {
  const [command, ...prefix] = lastcallCommand();
  const { LASTCALL_STATUS_URL: _, ...inherited } = process.env;
  return new Promise((done) => {
    const child = spawn(command, [...prefix, ...args], {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...inherited, ...env },
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk) => (stdout += chunk));
    child.stderr.on("data", (chunk) => (stderr += chunk));
    child.on("close", (code) => done({ code, stdout, stderr }));
  });
}

let servers: Server[] = [];
afterEach(async () => {
  await Promise.all(servers.map((s) => new Promise((done) => s.close(done))));
  servers = [];
});

/** Something else on the port (another service, a wrong port): 404 "page not found" to everything. */
async function notLastcall(): Promise<string> {
  const server = createServer((_, response) =>
    response.writeHead(404, { "content-type": "text/plain" }).end("404 page not found\n")
  );
  servers.push(server);
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  return `http://127.0.0.1:${(server.address() as { port: number }).port}`;
}

describe("one LASTCALL_STATUS_URL for wait, status and drain (a real lastcall run, default settings)", () => {
  it.each([
    ["the base URL (no path), as drain and status take it", (base: string) => base],
    ["wait's old readiness URL", (base: string) => `${base}/healthz/ready`],
    ["host:port", (base: string) => base.replace("http://", "")],
  ])("%s: wait exits 0, status answers, then drain drains", async (_, form) => {
    const lc = startLastcall(inboundConfig({ upstreamPort: app.port }));
    const base = await lc.statusUrl();
    const env = { LASTCALL_STATUS_URL: form(base) };
    expect(await lastcall(["wait", "--timeout", "30s"], env)).toEqual({
      code: 0,
      stdout: "",
      stderr: "",
    });
    const status = await lastcall(["status"], env);
    expect(status).toMatchObject({ code: 0, stderr: "" });
    expect(status.stdout).toMatch(/^lastcall: running, ready$/m);
    expect(await lastcall(["drain"], env)).toEqual({ code: 0, stdout: "", stderr: "" });
    expect(await lc.event("drain_start")).toMatchObject({ source: "POST /drain" });
    // The same value as a flag does the same: readiness now fails, and wait says why, and where.
    const wait = await lastcall(["wait", "--timeout", "300ms", "--status-url", form(base)]);
    expect(wait.code).toBe(1);
    expect(wait.stderr).toMatch(
      new RegExp(`^lastcall wait: not ready after 300ms: ${base}/healthz/ready says \\S`),
    );
  });
});

describe("every failure line names the URL asked", () => {
  it("something that is not lastcall on the port (404): wait, status, drain and exec each name their URL", async () => {
    const base = await notLastcall();
    const env = { LASTCALL_STATUS_URL: base };
    expect(await lastcall(["wait", "--timeout", "300ms"], env)).toEqual({
      code: 1,
      stdout: "",
      stderr:
        `lastcall wait: not ready after 300ms: ${base}/healthz/ready answered 404: "404 page not found"\n`,
    });
    expect(await lastcall(["status"], env)).toEqual({
      code: 1,
      stdout: "",
      stderr: `lastcall status: ${base}/v1/state answered 404: "404 page not found"\n`,
    });
    expect(await lastcall(["drain"], env)).toEqual({
      code: 1,
      stdout: "",
      stderr: `lastcall drain: ${base}/drain?sidecar=native answered 404\n`,
    });
    expect(await lastcall(["exec", "--timeout", "300ms", "--", "true"], env)).toEqual({
      code: 1,
      stdout: "",
      stderr:
        `lastcall exec: not ready after 300ms: ${base}/healthz/ready answered 404: "404 page not found"\n`,
    });
  });

  it("any form of the value, nothing listening: each command names the same server's URL", async () => {
    const port = await freePort();
    // A few values of every form (a fixed seed: the same ones each run), each through the real commands.
    const values = fc.sample(
      fc.tuple(
        fc.constantFrom(
          "http://127.0.0.1:PORT",
          "127.0.0.1:PORT",
          "http://127.0.0.1:PORT/healthz/ready",
          " http://127.0.0.1:PORT/ ",
        ),
        fc.oneof(fc.constant(""), fc.webPath(), fc.webQueryParameters().map((q) => `?${q}`)),
      ),
      { numRuns: 4, seed: 18 },
    ).map(([form, tail]) =>
      `${form.replace("PORT", String(port))}${form.endsWith("/ ") ? "" : tail}`
    );
    const base = `http://127.0.0.1:${port}`;
    for (const value of values) {
      const flag = ["--status-url", value];
      const wait = await lastcall(["wait", "--timeout", "300ms", ...flag]);
      expect(wait, value).toEqual({
        code: 1,
        stdout: "",
        stderr:
          `lastcall wait: not ready after 300ms: status server unreachable at ${base}/healthz/ready (ECONNREFUSED)\n`,
      });
      const status = await lastcall(["status", ...flag]);
      expect(status, value).toEqual({
        code: 1,
        stdout: "",
        stderr: `lastcall status: cannot reach ${base}/v1/state: ECONNREFUSED\n`,
      });
      const drain = await lastcall(["drain", ...flag]);
      expect(drain, value).toEqual({
        code: 1,
        stdout: "",
        stderr:
          `lastcall drain: cannot reach the agent at ${base}/drain?sidecar=native: ECONNREFUSED\n`,
      });
    }
  });

  it.each(["wait", "drain", "status", "exec"])(
    "%s refuses a value that is no http URL in one line naming it, exit 2",
    async (command) => {
      const result = await lastcall([command, ...(command === "exec" ? ["--", "true"] : [])], {
        LASTCALL_STATUS_URL: "unix:/admin/admin.sock",
      });
      expect(result).toMatchObject({ code: 2, stdout: "" });
      const errors = result.stderr.split("\n").filter((l) =>
        l && l !== "(run with --help for usage)"
      );
      expect(errors).toHaveLength(1);
      expect(errors[0]).toContain("LASTCALL_STATUS_URL");
      expect(errors[0]).toContain("'unix:/admin/admin.sock'");
    },
  );
});
