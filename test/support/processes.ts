// Helpers for the signal tests: lastcall's short-lived commands as real processes (optionally PID
// 1), and a stand-in status server.
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import {
  createServer as createHttpServer,
  type IncomingMessage,
  type ServerResponse,
} from "node:http";
import { connect } from "node:net";
import { waitFor } from "./envoy.ts";
import { lastcallCommand, type Runtime } from "./lastcall.ts";

/** Runs a command as PID 1 of a new PID namespace (util-linux; needs CAP_SYS_ADMIN). */
export const AS_PID_1 = ["unshare", "--pid", "--fork", "--mount-proc"];

/** Why commands cannot run as PID 1 here (undefined: they can). */
export function pid1Unavailable(): string | undefined {
  const probe = spawnSync(AS_PID_1[0], [...AS_PID_1.slice(1), "sh", "-c", "echo $$"], {
    encoding: "utf8",
  });
  if (probe.error) {
    return `${AS_PID_1.join(" ")}: ${probe.error.message} (util-linux's unshare is needed)`;
  }
  if (probe.status !== 0 || probe.stdout.trim() !== "1") {
    return `${
      AS_PID_1.join(" ")
    } cannot make a PID namespace here (exit ${probe.status}: ${probe.stderr.trim()}); it needs root or CAP_SYS_ADMIN`;
  }
  return undefined;
}

/** The host pid of the process `unshare --fork` (pid `wrapper`) started as PID 1. */
export function pid1Of(wrapper: number): Promise<number> {
  return waitFor(() => {
    const children = readFileSync(`/proc/${wrapper}/task/${wrapper}/children`, "utf8").trim();
    return children ? Number(children.split(" ")[0]) : undefined;
  }, { what: `the PID 1 started by unshare (pid ${wrapper})` });
}

/** A lastcall command running as a child of the test. */
export interface CommandProcess {
  readonly child: ChildProcess;
  /** The host pid of lastcall itself (inside `unshare` when run as PID 1). */
  pid(): Promise<number>;
  /** stdout and stderr so far. */
  output(): string;
  /** Resolves when the output matches `pattern`. */
  untilOutput(pattern: RegExp, timeoutMs?: number): Promise<void>;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Options of {@linkcode startCommand}. */
export interface CommandOptions {
  runtime?: Runtime;
  /** Run lastcall as PID 1 of a new PID namespace. */
  pid1?: boolean;
}

const running = new Set<ChildProcess>();

/** Starts `lastcall ARGS...`; {@linkcode killCommands} ends whatever a test left running. */
export function startCommand(args: string[], options: CommandOptions = {}): CommandProcess {
  const command = [...(options.pid1 ? AS_PID_1 : []), ...lastcallCommand(options.runtime), ...args];
  const child = spawn(command[0], command.slice(1), { stdio: ["ignore", "pipe", "pipe"] });
  running.add(child);
  let output = "";
  const changed = new Set<() => void>();
  for (const stream of [child.stdout!, child.stderr!]) {
    stream.on("data", (chunk) => {
      output += String(chunk);
      for (const check of changed) check();
    });
  }
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((done) =>
    child.once("exit", (code, signal) => {
      running.delete(child);
      done({ code, signal });
    })
  );
  const pid = options.pid1 ? pid1Of(child.pid!) : Promise.resolve(child.pid!);
  return {
    child,
    pid: () => pid,
    output: () => output,
    untilOutput: (pattern, timeoutMs = 30_000) =>
      new Promise((done, fail) => {
        const timer = setTimeout(
          () => fail(new Error(`no ${pattern} in the output after ${timeoutMs} ms:\n${output}`)),
          timeoutMs,
        );
        const check = () => {
          if (!pattern.test(output)) return;
          clearTimeout(timer);
          changed.delete(check);
          done();
        };
        changed.add(check);
        check();
      }),
    exited,
  };
}

/** SIGKILLs every command a test started that still runs (for afterEach). */
export function killCommands(): void {
  for (const child of running) child.kill("SIGKILL");
}

/** A stand-in for the agent's status server: readiness, app reports, `/quitquitquit`. */
export interface StatusStandIn {
  /** Its `/healthz/ready` URL. */
  readonly url: string;
  /** Readiness probes answered so far. */
  readonly probes: number;
  /** `POST /v1/app` bodies, in order. */
  readonly apps: Array<{ state: string; id?: string; pid?: number; status?: number }>;
  /** Answer 200 from now on (503 until then). */
  ready: boolean;
  /** Resolves when `predicate` holds, checked on every request. */
  until(predicate: (s: StatusStandIn) => boolean, what: string): Promise<void>;
  close(): Promise<void>;
}

/** Starts a {@linkcode StatusStandIn} on 127.0.0.1. */
export async function startStatusStandIn(): Promise<StatusStandIn> {
  const waiters = new Set<() => void>();
  const server = createHttpServer(async (request: IncomingMessage, response: ServerResponse) => {
    let body = "";
    for await (const chunk of request) body += chunk;
    if (request.url === "/healthz/ready") {
      probes++;
      response.writeHead(standIn.ready ? 200 : 503, { "content-type": "application/json" });
      response.end(
        JSON.stringify(
          standIn.ready ? { ready: true } : { ready: false, reason: "stand-in not ready" },
        ),
      );
    } else if (request.url === "/v1/app") {
      standIn.apps.push(JSON.parse(body));
      response.end("{}");
    } else {
      response.end("{}");
    }
    for (const check of waiters) check();
  });
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  let probes = 0;
  const standIn: StatusStandIn = {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}/healthz/ready`,
    get probes() {
      return probes;
    },
    apps: [],
    ready: false,
    until: (predicate, what) =>
      new Promise((done, fail) => {
        const timer = setTimeout(() => fail(new Error(`timed out waiting for ${what}`)), 30_000);
        const check = () => {
          if (!predicate(standIn)) return;
          clearTimeout(timer);
          waiters.delete(check);
          done();
        };
        waiters.add(check);
        check();
      }),
    close: () =>
      new Promise((done) => {
        server.close(() => done());
        server.closeAllConnections();
      }),
  };
  return standIn;
}

/** Node's default inspector address, which SIGUSR1 opens in a process without a listener. */
export const INSPECTOR_PORT = 9229;

/** Whether something accepts connections on 127.0.0.1:9229 now. */
export function inspectorAnswers(): Promise<boolean> {
  return new Promise((done) => {
    const socket = connect({ host: "127.0.0.1", port: INSPECTOR_PORT });
    socket.once("connect", () => {
      socket.destroy();
      done(true);
    });
    socket.once("error", () => done(false));
  });
}

/**
 * Whether the inspector port opens within `ms`. An absence can only be watched for a while:
 * the window is several times what a plain Node process takes to open it after SIGUSR1 (the
 * control test measures that).
 */
export async function inspectorOpensWithin(ms: number): Promise<boolean> {
  const until = Date.now() + ms;
  do {
    if (await inspectorAnswers()) return true;
    await new Promise((done) => setTimeout(done, 10));
  } while (Date.now() < until);
  return false;
}
