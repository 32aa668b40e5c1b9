// Starts a real Envoy for a test: admin and listeners on port 0 (discovered, never guessed), hot
// restart disabled so parallel tests share no shared memory, output kept for failure messages;
// and waitFor, the polling every test uses. Bootstraps to start it with: envoy-bootstrap.ts.
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** Options of {@linkcode startEnvoy}. */
export interface EnvoyOptions {
  /** Worker threads (`--concurrency`); keep ≤ 4 on 2 cores. @default 2 */
  concurrency?: number;
  /** Extra command-line arguments. @default [] */
  args?: string[];
  /** Deadline for `/ready` to answer 200. @default 20000 */
  readyTimeoutMs?: number;
}

/** A running Envoy started by a test. */
export interface TestEnvoy {
  /** Envoy's process id. */
  readonly pid: number;
  /** Admin base URL, e.g. `http://127.0.0.1:40123`. */
  readonly adminUrl: string;
  /** Port a named listener is bound to (from `/listeners?format=json`). */
  port(listener: string): number;
  /** `GET /stats?filter=<regex>&format=json` as a name → value map (histograms skipped). */
  stats(filter: string): Promise<Record<string, number>>;
  /** Everything Envoy wrote to stdout and stderr so far. */
  output(): string;
  /** Settles when the process ends. */
  readonly exited: Promise<EnvoyExit>;
  /** SIGTERM, then SIGKILL after `killAfterMs`; resolves with the exit. */
  stop(killAfterMs?: number): Promise<EnvoyExit>;
}

/** How an Envoy process ended. */
export interface EnvoyExit {
  /** Exit code, or null when a signal ended it. */
  code: number | null;
  /** Signal that ended it, if any. */
  signal: string | null;
}

/** Envoy exited before it was ready; carries its output. */
export class EnvoyExitedError extends Error {
  override name = "EnvoyExitedError";
  /** The exit. */
  readonly exit: EnvoyExit;
  /** Everything Envoy printed. */
  readonly output: string;

  /** @param exit how it ended @param output what it printed */
  constructor(exit: EnvoyExit, output: string) {
    super(
      `Envoy exited before it was ready (code ${exit.code}, signal ${exit.signal}):\n${
        tail(output)
      }`,
    );
    this.exit = exit;
    this.output = output;
  }
}

const running = new Set<TestEnvoy>();

function tail(text: string, lines = 40): string {
  return text.trimEnd().split("\n").slice(-lines).join("\n");
}

/** Options of {@linkcode waitFor}. */
export interface WaitForOptions {
  /** Deadline. @default 10000 */
  timeoutMs?: number;
  /** Delay between checks. @default 20 */
  intervalMs?: number;
  /** What is awaited, for the timeout message. @default "condition" */
  what?: string;
  /** Rejects at once when this settles first (e.g. a process exit). */
  abort?: Promise<unknown>;
}

/** Polls `check` until it returns a value other than undefined; throws at the deadline or on `abort`. */
export async function waitFor<T>(
  check: () => T | undefined | Promise<T | undefined>,
  options: WaitForOptions = {},
): Promise<T> {
  const timeoutMs = options.timeoutMs ?? 10_000;
  const what = options.what ?? "condition";
  let lastError: unknown;
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, fail) => {
    timer = setTimeout(() => {
      const why = lastError instanceof Error ? `: ${lastError.message}` : "";
      fail(new Error(`Timed out after ${timeoutMs} ms waiting for ${what}${why}`));
    }, timeoutMs);
  });
  const aborted = options.abort?.then(() => {
    throw new Error(`Gave up waiting for ${what}`);
  });
  // Every await races `stop`, so a check that hangs (a stuck admin socket) cannot outlive it.
  const stop = aborted ? Promise.race([expired, aborted]) : expired;
  let stopped: { error: unknown } | undefined;
  stop.catch((error: unknown) => {
    stopped = { error };
  });
  try {
    for (;;) {
      try {
        const value = await Promise.race([Promise.resolve().then(check), stop]);
        if (value !== undefined) return value;
      } catch (error) {
        if (stopped) throw stopped.error;
        lastError = error;
      }
      await Promise.race([new Promise((done) => setTimeout(done, options.intervalMs ?? 20)), stop]);
    }
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Starts Envoy from a bootstrap object (admin is added on 127.0.0.1:0 if absent) and resolves
 * once `/ready` answers 200; rejects with {@linkcode EnvoyExitedError} if Envoy exits first.
 *
 * @example
 * ```ts
 * const envoy = await startEnvoy(bootstrap, { concurrency: 2 });
 * const port = envoy.port("ingress");
 * await envoy.stop();
 * ```
 */
export async function startEnvoy(
  bootstrap: Record<string, unknown>,
  options: EnvoyOptions = {},
): Promise<TestEnvoy> {
  const binary = process.env.ENVOY_BIN;
  if (!binary) {
    throw new Error(
      "Cannot start Envoy: ENVOY_BIN is not set (test/support/global-setup.ts sets it)",
    );
  }
  const dir = mkdtempSync(join(tmpdir(), "lastcall-envoy-"));
  const config = {
    admin: { address: { socket_address: { address: "127.0.0.1", port_value: 0 } } },
    ...bootstrap,
  };
  writeFileSync(join(dir, "envoy.json"), JSON.stringify(config));
  const addressPath = join(dir, "admin-address");
  const args = [
    "-c",
    join(dir, "envoy.json"),
    "--concurrency",
    String(options.concurrency ?? 2),
    "--admin-address-path",
    addressPath,
    // No shared memory or domain sockets: tests run side by side without base-id collisions.
    "--disable-hot-restart",
    "--local-address-ip-version",
    "v4",
    "--log-level",
    "info",
    ...(options.args ?? []),
  ];
  const child = spawn(binary, args, { stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
    output += chunk;
  });
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => {
    output += chunk;
  });
  const exited = new Promise<EnvoyExit>((done) => {
    child.once("exit", (code, signal) => done({ code, signal }));
    child.once("error", (error) => {
      output += `spawn error: ${error.message}\n`;
      done({ code: null, signal: null });
    });
  });
  void exited.then(() => rmSync(dir, { recursive: true, force: true }));
  const died = exited.then((exit) => {
    throw new EnvoyExitedError(exit, output);
  });
  died.catch(() => {});

  const envoy = makeEnvoy(child, exited, () => output);
  running.add(envoy);
  try {
    const address = await waitFor(() => {
      try {
        return readFileSync(addressPath, "utf8").trim() || undefined;
      } catch {
        return undefined;
      }
    }, {
      what: "Envoy's admin address file",
      timeoutMs: options.readyTimeoutMs ?? 20_000,
      abort: died,
    });
    (envoy as { adminUrl: string }).adminUrl = `http://${address}`;
    await waitFor(
      async () => ((await fetch(`${envoy.adminUrl}/ready`, { signal: AbortSignal.timeout(2000) }))
          .status === 200
        ? true
        : undefined),
      { what: "Envoy /ready", timeoutMs: options.readyTimeoutMs ?? 20_000, abort: died },
    );
    const listeners = await (await fetch(`${envoy.adminUrl}/listeners?format=json`, {
      signal: AbortSignal.timeout(5000),
    })).json() as ListenerStatuses;
    for (const status of listeners.listener_statuses ?? []) {
      const port = status.local_address?.socket_address?.port_value;
      if (port) ports(envoy).set(status.name, port);
    }
    return envoy;
  } catch (error) {
    await envoy.stop();
    throw error;
  }
}

interface ListenerStatuses {
  listener_statuses?: {
    name: string;
    local_address?: { socket_address?: { port_value?: number } };
  }[];
}

const portMaps = new WeakMap<TestEnvoy, Map<string, number>>();
function ports(envoy: TestEnvoy): Map<string, number> {
  let map = portMaps.get(envoy);
  if (!map) portMaps.set(envoy, map = new Map());
  return map;
}

function makeEnvoy(
  child: ChildProcess,
  exited: Promise<EnvoyExit>,
  output: () => string,
): TestEnvoy {
  let ended = false;
  void exited.then(() => {
    ended = true;
  });
  const envoy: TestEnvoy = {
    pid: child.pid as number,
    adminUrl: "",
    port(listener) {
      const port = ports(envoy).get(listener);
      if (port === undefined) {
        throw new Error(
          `Envoy has no listener named ${listener}: ${[...ports(envoy).keys()].join(", ")}`,
        );
      }
      return port;
    },
    async stats(filter) {
      const response = await fetch(
        `${envoy.adminUrl}/stats?format=json&filter=${encodeURIComponent(filter)}`,
        { signal: AbortSignal.timeout(5000) },
      );
      const body = await response.json() as { stats: { name?: string; value?: number }[] };
      const result: Record<string, number> = {};
      for (const stat of body.stats) {
        if (stat.name !== undefined && typeof stat.value === "number") {
          result[stat.name] = stat.value;
        }
      }
      return result;
    },
    output,
    exited,
    async stop(killAfterMs = 5000) {
      running.delete(envoy);
      if (!ended) child.kill("SIGTERM");
      const timer = setTimeout(() => {
        if (!ended) child.kill("SIGKILL");
      }, killAfterMs);
      const exit = await exited;
      clearTimeout(timer);
      return exit;
    },
  };
  return envoy;
}

/** Stops every Envoy started by this test file that is still running (for afterEach/afterAll). */
export async function stopAllEnvoys(): Promise<void> {
  await Promise.all([...running].map((envoy) => envoy.stop()));
}
