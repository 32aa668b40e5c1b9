// `lastcall status` through the real bundle: for people or as JSON, one line and exit 1 when
// nothing answers, exit 2 on a bad flag.
import { spawn } from "node:child_process";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { freePort, lastcallCommand } from "../support/lastcall.ts";
import { serving, upstreamForFile } from "../support/serving.ts";
import { DRAINING_LINES, drainingState } from "../support/status-states.ts";

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

/** Runs `lastcall status ARGS...` (the bundle) to its end. */
function status(args: string[], env: Record<string, string> = {}): Promise<Result> {
  const [command, ...prefix] = lastcallCommand();
  const started = Date.now();
  return new Promise((done) => {
    const child = spawn(command, [...prefix, "status", ...args], {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, ...env },
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk) => (stdout += chunk));
    child.stderr.on("data", (chunk) => (stderr += chunk));
    child.on("close", (code) => done({ code, stdout, stderr, ms: Date.now() - started }));
  });
}

const lines = (text: string) => text.split("\n").filter(Boolean);

/** A stand-in status server: answers each request with `answer`, and keeps the paths asked. */
interface StandIn {
  /** Its origin, `http://127.0.0.1:PORT`. */
  readonly base: string;
  readonly paths: string[];
  answer: (path: string, response: ServerResponse) => void;
  close(): Promise<void>;
}

/** What a draining lastcall answers: its state, and 503 `draining` for readiness. */
function drainingLastcall(body: string): StandIn["answer"] {
  return (path, response) => {
    if (path === "/healthz/ready") {
      response.writeHead(503, { "content-type": "application/json" }).end(
        '{"ready":false,"reason":"draining"}',
      );
    } else if (path === "/v1/state") {
      response.writeHead(200, { "content-type": "application/json" }).end(body);
    } else {
      response.writeHead(404).end("404 Not Found");
    }
  };
}

async function startStandIn(): Promise<StandIn> {
  const server = createServer((request: IncomingMessage, response: ServerResponse) => {
    standIn.paths.push(request.url ?? "");
    standIn.answer(request.url ?? "", response);
  });
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  const standIn: StandIn = {
    base: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
    paths: [],
    answer: drainingLastcall(JSON.stringify(drainingState())),
    close: () =>
      new Promise((done) => {
        server.close(() => done());
        server.closeAllConnections();
      }),
  };
  return standIn;
}

describe("lastcall status against a status server", () => {
  let standIn: StandIn;
  beforeAll(async () => (standIn = await startStandIn()));
  afterAll(() => standIn.close());
  afterEach(() => {
    standIn.paths.length = 0;
    standIn.answer = drainingLastcall(JSON.stringify(drainingState()));
  });

  it("prints a drain for people: what it waits for, oldest first, and the time left", async () => {
    const result = await status(["--status-url", standIn.base]);
    expect(result).toMatchObject({ code: 0, stderr: "" });
    expect(lines(result.stdout)).toEqual(DRAINING_LINES);
    expect(standIn.paths.sort()).toEqual(["/healthz/ready", "/v1/state"]);
  });

  it("--json prints /v1/state as it was answered: one line that parses to it", async () => {
    const body = JSON.stringify(drainingState());
    const result = await status(["--status-url", standIn.base, "--json"]);
    expect(result).toMatchObject({ code: 0, stderr: "" });
    expect(result.stdout).toBe(`${body}\n`);
    expect(JSON.parse(result.stdout)).toEqual(drainingState());
    expect(standIn.paths).toEqual(["/v1/state"]);
  });

  it.each(
    [
      ["a base URL", (base: string) => ["--status-url", base], {}],
      [
        "a URL with a path: its origin",
        (base: string) => ["--status-url", `${base}/some/where?x=1`],
        {},
      ],
      [
        "wait's /healthz/ready URL",
        (base: string) => ["--status-url", `${base}/healthz/ready`],
        {},
      ],
      ["host:port", (base: string) => ["--status-url", base.replace("http://", "")], {}],
      [
        "LASTCALL_STATUS_URL as wait takes it",
        () => [],
        (base: string) => ({ LASTCALL_STATUS_URL: `${base}/healthz/ready` }),
      ],
    ] as const,
  )("finds /v1/state from %s", async (_, args, env) => {
    const result = await status(
      ["--json", ...args(standIn.base)],
      typeof env === "function" ? env(standIn.base) : env,
    );
    expect(result).toMatchObject({ code: 0, stderr: "" });
    expect(standIn.paths).toEqual(["/v1/state"]);
  });

  it("a status server that is not lastcall's: exit 1, one line naming the URL and what it answered", async () => {
    standIn.answer = (_, response) =>
      response.writeHead(404, { "content-type": "text/plain" }).end("404 page not found\n");
    const notFound = await status(["--status-url", standIn.base]);
    expect(notFound).toMatchObject({ code: 1, stdout: "" });
    expect(lines(notFound.stderr)).toEqual([
      `lastcall status: ${standIn.base}/v1/state answered 404: "404 page not found"`,
    ]);

    standIn.answer = (_, response) =>
      response.writeHead(200, { "content-type": "text/html" }).end("<html>hello</html>");
    const html = await status(["--status-url", standIn.base, "--json"]);
    expect(html).toMatchObject({ code: 1, stdout: "" });
    expect(lines(html.stderr)).toEqual([
      `lastcall status: ${standIn.base}/v1/state answered something that is not JSON: "<html>hello</html>"`,
    ]);

    standIn.answer = (_, response) => response.writeHead(200).end("[1,2]");
    const list = await status(["--status-url", standIn.base]);
    expect(list).toMatchObject({ code: 1, stdout: "" });
    expect(lines(list.stderr)).toEqual([
      `lastcall status: ${standIn.base}/v1/state answered JSON that is not lastcall's state: "[1,2]"`,
    ]);
  });

  it("a status server that does not answer: exit 1 after the default 2 s, one line naming the URL", async () => {
    standIn.answer = () => {}; // never answers
    const result = await status(["--status-url", standIn.base]);
    expect(result).toMatchObject({ code: 1, stdout: "" });
    expect(lines(result.stderr)).toEqual([
      `lastcall status: ${standIn.base}/v1/state did not answer within 2s`,
    ]);
    expect(result.ms).toBeGreaterThanOrEqual(2000);
    expect(result.ms).toBeLessThan(10_000);
  });

  it("a state of another shape (a newer or older lastcall) is printed as far as it goes", async () => {
    standIn.answer = drainingLastcall(
      JSON.stringify({
        phase: "draining",
        drain: { holders: [{ path: "/only-a-path" }, 7], future: true },
        inflight: "many",
      }),
    );
    const result = await status(["--status-url", standIn.base]);
    expect(result).toMatchObject({ code: 0, stderr: "" });
    expect(lines(result.stdout)).toEqual([
      "lastcall: draining",
      "envoy: not running",
      "in flight: ?",
      "waiting for, oldest first:",
      "   ?  (unknown)  /only-a-path",
      "  + ? not named",
    ]);
  });
});

describe("lastcall status without a lastcall", () => {
  it("nothing listens: exit 1, one line naming the URL and the cause", async () => {
    const port = await freePort();
    const result = await status(["--status-url", `http://127.0.0.1:${port}/healthz/ready`]);
    expect(result).toMatchObject({ code: 1, stdout: "" });
    expect(lines(result.stderr)).toEqual([
      `lastcall status: cannot reach http://127.0.0.1:${port}/v1/state: ECONNREFUSED`,
    ]);
  });

  it.each([
    [["--status-url", "ftp://127.0.0.1:15020"], {}, "--status-url", "ftp://127.0.0.1:15020"],
    [["--status-url", "http://"], {}, "--status-url", "http://"],
    [[], { LASTCALL_STATUS_URL: "::nope" }, "LASTCALL_STATUS_URL", "::nope"],
    [["--timeout", "soon"], {}, "--timeout", "soon"],
    [["--json", "extra"], {}, "too many arguments", undefined],
  ])("usage error %j %j: exit 2, one line", async (args, env, named, value) => {
    const result = await status(args, env);
    expect(result).toMatchObject({ code: 2, stdout: "" });
    const errors = lines(result.stderr).filter((l) => l !== "(run with --help for usage)");
    expect(errors).toHaveLength(1);
    expect(errors[0]).toContain(named);
    if (value !== undefined) expect(errors[0]).toContain(`'${value}'`);
  });

  it("--help tells what it prints and the flags, exit 0", async () => {
    const result = await status(["--help"]);
    expect(result.code).toBe(0);
    const help = result.stdout.replace(/\s+/g, " ");
    expect(help).toContain("during a drain, what it waits for (oldest first) and the time left");
    expect(help).toContain(
      '--status-url <url> the agent\'s status server: a base URL, host:port, or any URL of it (its origin is used) (default: "http://127.0.0.1:15020", env: LASTCALL_STATUS_URL)',
    );
    expect(help).toContain("--json print GET /v1/state as lastcall answered it: one line of JSON");
    expect(help).toContain("--timeout <duration> give up on an answer after (default: 2s");
  });
});

describe("lastcall status against a real lastcall run (default settings)", () => {
  const app = upstreamForFile();

  it("idle: running, ready, epoch 0 and its pid, nothing in flight; --json is its /v1/state", async () => {
    // Ready, and the filter has reported (the in-flight count is the filter's).
    const { status: base, envoyPid } = await serving(app.port, []);
    const text = await status(["--status-url", base]);
    expect(text).toMatchObject({ code: 0, stderr: "" });
    expect(lines(text.stdout)).toEqual([
      "lastcall: running, ready",
      `envoy: epoch 0 (pid ${envoyPid}), serving epoch 0; 0 restarts, 0 hot restarts`,
      "in flight: 0",
    ]);

    const json = await status(["--status-url", `${base}/healthz/ready`, "--json"]);
    expect(json).toMatchObject({ code: 0, stderr: "" });
    expect(lines(json.stdout)).toHaveLength(1);
    const state = await (await fetch(`${base}/v1/state`)).json();
    expect(JSON.parse(json.stdout)).toEqual(state);
    expect(state).toMatchObject({
      phase: "running",
      current: { epoch: 0, pid: envoyPid },
      inflight: 0,
      filter: "reporting",
    });
    expect(state).not.toHaveProperty("drain");
  });

  it("after POST /drain's wait ended: how and when it ended, no deadline counting down", async () => {
    const { lc, status: base } = await serving(app.port, []);
    expect((await fetch(`${base}/drain`, { method: "POST" })).status).toBe(200);
    const done = await lc.event("drain_wait_done");
    const state = await (await fetch(`${base}/v1/state`)).json();
    expect(state.drain.wait_ended.reason).toBe("inflight_zero");
    // Taken as the wait returned, right after it logged drain_wait_done.
    expect(state.drain.wait_ended.after_ms - Number(done.ms)).toBeGreaterThanOrEqual(0);
    expect(state.drain.wait_ended.after_ms - Number(done.ms)).toBeLessThan(100);
    const text = await status(["--status-url", base]);
    expect(text).toMatchObject({ code: 0, stderr: "" });
    expect(lines(text.stdout)[0]).toMatch(
      /^lastcall: draining \(POST \/drain\) for [\d.]+ s, wait ended after 5\.\d s \(inflight_zero\), mode inflight$/,
    );
  });
});
