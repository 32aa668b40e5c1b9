// Runs the real lastcall (the bundle, the single executable, or the TypeScript under Deno) as a
// child process and follows its JSON event lines, so tests wait on events, not on sleeps.
import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { createServer } from "node:net";
import { fileURLToPath } from "node:url";
import { resolveDeno } from "../../build/deno.mjs";
import { httpListener, localCluster, ROUTER } from "./envoy-bootstrap.ts";
import { tempDir } from "./temp.ts";
import type { Json } from "./json.ts";
import { followJsonEvents } from "./json-events.ts";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

/** How lastcall is run. */
export type Runtime = "bundle" | "binary" | "deno";

/** The command line that runs lastcall in `runtime`. */
export function lastcallCommand(runtime: Runtime = "bundle"): string[] {
  switch (runtime) {
    case "bundle":
      return [process.execPath, join(root, "dist/lastcall.mjs")];
    case "binary":
      return [join(root, "dist/lastcall")];
    case "deno":
      return [resolveDeno(), "run", "--allow-all", "--quiet", join(root, "agent/main.ts")];
  }
}

/** One event line of lastcall. */
export interface LastcallEvent {
  ts: string;
  event: string;
  [field: string]: unknown;
}

/** Options of {@linkcode startLastcall}. */
export interface StartOptions {
  runtime?: Runtime;
  /** Extra `lastcall run` flags (admin and status ports default to 0). */
  args?: string[];
  /** Extra Envoy arguments (after `--`). @default ["-l", "warning"] */
  envoyArgs?: string[];
  env?: Record<string, string>;
  /** A command lastcall runs under, e.g. `unshare --pid --fork --mount-proc` (then `pid` is that command's). */
  wrap?: string[];
}

/** A running `lastcall run`. */
export interface TestLastcall {
  readonly pid: number;
  /** Every event seen so far, in order. */
  readonly events: LastcallEvent[];
  /** The config file lastcall runs (tests rewrite it to trigger reloads). */
  readonly configPath: string;
  /** Resolves with the first event named `name` (past or future) matching `match`. */
  event(
    name: string,
    match?: (e: LastcallEvent) => boolean,
    timeoutMs?: number,
  ): Promise<LastcallEvent>;
  /** Status server base URL, once the `start` event came. */
  statusUrl(): Promise<string>;
  /** Admin base URL of the current Envoy, from the latest `ready` event. */
  adminUrl(): string;
  /** Port of a listener of the current Envoy. */
  listenerPort(name: string): Promise<number>;
  /** Everything printed on stdout and stderr. */
  output(): string;
  readonly exited: Promise<{ code: number | null; signal: string | null }>;
  signal(signal: NodeJS.Signals): void;
  /** SIGTERM (or the given signal), then SIGKILL after 20 s; resolves with the exit. */
  stop(signal?: NodeJS.Signals): Promise<{ code: number | null; signal: string | null }>;
}

const started = new Set<TestLastcall>();
/** Every lastcall started since {@linkcode startedSince} was last reset, for failure reports. */
const recent: TestLastcall[] = [];

/** The lastcalls started since the last call (the setup file prints their output when a test fails). */
export function startedSince(): TestLastcall[] {
  return recent.splice(0);
}

/** Writes a config object to a fresh temporary file (removed after the test file) and returns its path. */
export function writeConfig(config: unknown, dir = tempDir("lastcall-test-")): string {
  const path = join(dir, "envoy.json");
  writeFileSync(path, JSON.stringify(config, null, 2));
  return path;
}

/**
 * Starts `lastcall run --config <file>` with admin and status on port 0.
 *
 * @example
 * ```ts
 * const lc = await startLastcall(inboundConfig({ upstreamPort: app.port }));
 * await lc.event("ready");
 * ```
 */
export function startLastcall(config: unknown, options: StartOptions = {}): TestLastcall {
  const configPath = typeof config === "string" ? config : writeConfig(config);
  const [command, ...prefix] = lastcallCommand(options.runtime);
  const args = [
    ...prefix,
    "run",
    "--config",
    configPath,
    "--admin-port",
    "0",
    "--status-port",
    "0",
    ...(options.args ?? []),
    "--",
    ...(options.envoyArgs ?? ["-l", "warning"]),
  ];
  const wrapped = [...(options.wrap ?? []), command, ...args];
  const child: ChildProcess = spawn(wrapped[0], wrapped.slice(1), {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, ...options.env },
  });
  let output = "";
  const follow = followJsonEvents<LastcallEvent>(child.stdout!, {
    onLine: (line) => (output += `${line}\n`),
    parse: (line) => {
      if (!line.startsWith("{")) return undefined;
      try {
        return JSON.parse(line) as LastcallEvent;
      } catch {
        return undefined; // Envoy output that happens to start with {
      }
    },
  });
  const events = follow.events;
  child.stderr!.on("data", (chunk) => (output += String(chunk)));
  const exited = new Promise<{ code: number | null; signal: string | null }>((done) => {
    child.once("exit", (code, signal) => {
      started.delete(handle);
      // Let the last lines be read before anyone looks.
      setImmediate(() => {
        hasExited = true;
        follow.end();
        done({ code, signal });
      });
    });
  });
  let hasExited = false;
  exited.then(() => (hasExited = true));

  const event = (
    name: string,
    match: (e: LastcallEvent) => boolean = () => true,
    timeoutMs = 30_000,
  ) =>
    follow.next(name, {
      match,
      timeoutMs,
      ended: () => new Error(`lastcall exited before event "${name}":\n${output.slice(-4000)}`),
      timedOut: () =>
        new Error(
          `Timed out after ${timeoutMs} ms waiting for event "${name}":\n${output.slice(-4000)}`,
        ),
    });

  const handle: TestLastcall = {
    pid: child.pid as number,
    events,
    configPath,
    event,
    async statusUrl() {
      const start = await event("start");
      return `http://127.0.0.1:${start.status_port}`;
    },
    adminUrl() {
      const ready = events.filter((e) => e.event === "ready").at(-1);
      if (!ready) throw new Error("lastcall has not reported a ready Envoy yet");
      return String(ready.admin);
    },
    async listenerPort(name: string) {
      const response = await fetch(`${handle.adminUrl()}/listeners?format=json`);
      const body = await response.json() as {
        listener_statuses: Array<
          { name: string; local_address: { socket_address: { port_value: number } } }
        >;
      };
      const listener = body.listener_statuses.find((l) => l.name === name);
      if (!listener) throw new Error(`No listener named ${name}: ${JSON.stringify(body)}`);
      return listener.local_address.socket_address.port_value;
    },
    output: () => output,
    exited,
    signal: (signal) => {
      if (!hasExited) child.kill(signal);
    },
    async stop(signal = "SIGTERM") {
      handle.signal(signal);
      const timer = setTimeout(() => handle.signal("SIGKILL"), 20_000);
      const exit = await exited;
      clearTimeout(timer);
      return exit;
    },
  };
  started.add(handle);
  recent.push(handle);
  return handle;
}

/** Kills every lastcall a test file started that still runs (for afterEach). */
export async function stopAllLastcalls(): Promise<void> {
  await Promise.all([...started].map((lc) => lc.stop("SIGKILL")));
}

/** Options of {@linkcode inboundConfig}. */
export interface InboundConfigOptions {
  upstreamPort: number;
  /** Listener name and stat prefix. @default "ingress" */
  listener?: string;
  /** Envoy's health check filter in pass-through mode, for `/healthcheck/fail`. @default false */
  healthCheck?: boolean;
}

/**
 * A pod's Envoy config: {@linkcode inboundConfig}'s listener in front of the app on `appPort`,
 * and an OUTBOUND `egress` one (to the same cluster) for the app's calls out.
 */
export function podConfig(appPort: number): Record<string, unknown> {
  const config = inboundConfig({ upstreamPort: appPort }) as {
    static_resources: { listeners: Array<Json> };
  };
  const egress = structuredClone(config.static_resources.listeners[0]);
  egress.name = "egress";
  egress.traffic_direction = "OUTBOUND";
  egress.filter_chains[0].filters[0].typed_config.stat_prefix = "egress";
  config.static_resources.listeners.push(egress);
  return config;
}

/** {@linkcode inboundConfig} with its listener on a unix socket: the config and the socket's path. */
export function unixSocketConfig(
  appPort: number,
): { config: Record<string, unknown>; path: string } {
  const path = join(tempDir("lastcall-pipe-"), "in.sock");
  const config = inboundConfig({ upstreamPort: appPort }) as {
    static_resources: { listeners: Array<Json> };
  };
  config.static_resources.listeners[0].address = { pipe: { path } };
  return { config, path };
}

/**
 * A user's Envoy config, as lastcall gets it: one INBOUND HTTP listener on a free port in front
 * of cluster `app`, no admin, no wasm filter (lastcall adds both).
 */
export function inboundConfig(options: InboundConfigOptions): Record<string, unknown> {
  const name = options.listener ?? "ingress";
  const httpFilters: unknown[] = [];
  if (options.healthCheck) {
    httpFilters.push({
      name: "envoy.filters.http.health_check",
      typed_config: {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.health_check.v3.HealthCheck",
        pass_through_mode: false,
        headers: [{ name: ":path", string_match: { exact: "/healthz" } }],
      },
    });
  }
  httpFilters.push(ROUTER);
  return {
    static_resources: {
      listeners: [httpListener({ name, direction: "INBOUND", httpFilters })],
      clusters: [localCluster("app", options.upstreamPort)],
    },
  };
}

/** The kernel's ephemeral port range (outbound connections take their local port from it). */
function ephemeralRange(): [number, number] {
  try {
    const [low, high] = readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(
      /\s+/,
    ).map(Number);
    if (low > 0 && high >= low) return [low, high];
  } catch { /* not Linux: assume the IANA range */ }
  return [49152, 65535];
}

let nextPort = 0;

/**
 * A free TCP port on 127.0.0.1, released before it is returned, for a listener that binds it
 * later (seconds later, when a control plane sends it). It is taken below the ephemeral range,
 * so no outbound connection of the busy test run can hold it as its local port meanwhile (Envoy
 * would then refuse the listener: address in use); each vitest worker has its own slice.
 */
export async function freePort(): Promise<number> {
  const [ephemeralLow] = ephemeralRange();
  const high = Math.min(ephemeralLow, 65536) - 1;
  const low = Math.max(1024, high - 8191);
  const workers = 4;
  const worker = Number(process.env.VITEST_POOL_ID ?? 1) % workers;
  const slice = Math.floor((high - low + 1) / workers);
  if (nextPort === 0) nextPort = Math.floor(Math.random() * slice);
  for (let tries = 0; tries < slice; tries++) {
    const port = low + worker * slice + (nextPort++ % slice);
    if (await canListen(port)) return port;
  }
  throw new Error(`No free port in ${low + worker * slice}-${low + (worker + 1) * slice - 1}`);
}

function canListen(port: number): Promise<boolean> {
  const server = createServer();
  return new Promise((done) => {
    server.once("error", () => done(false));
    server.listen(port, "127.0.0.1", () => server.close(() => done(true)));
  });
}

/** Whether a process id is alive (signal 0). */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** How a `lastcall` command ended. */
export interface CommandResult {
  code: number | null;
  stdout: string;
  stderr: string;
  /** Wall time, ms. */
  ms: number;
}

/** Runs `lastcall <args>` (the bundle) to its end, with `input` on standard input and `env` added. */
export function runLastcall(
  args: string[],
  input = "",
  env: Record<string, string> = {},
): Promise<CommandResult> {
  const [command, ...prefix] = lastcallCommand();
  const started = Date.now();
  return new Promise((done) => {
    const child = spawn(command, [...prefix, ...args], {
      stdio: ["pipe", "pipe", "pipe"],
      env: { ...process.env, ...env },
    });
    let stdout = "";
    let stderr = "";
    child.stdout!.on("data", (chunk) => (stdout += chunk));
    child.stderr!.on("data", (chunk) => (stderr += chunk));
    child.on("close", (code) => done({ code, stdout, stderr, ms: Date.now() - started }));
    child.stdin!.end(input);
  });
}
