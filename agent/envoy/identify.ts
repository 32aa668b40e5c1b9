// Is the binary lastcall was given Envoy? `--version`, asked once a start failed or is slow: a
// binary that is not Envoy (`--envoy /bin/true`, a wrapper script that ignores its arguments)
// would otherwise pass `--mode validate` (exit 0) and then exit at every start until the budget
// is spent.
import { spawn } from "node:child_process";
import process from "node:process";
import { StartError } from "../lib/errors.ts";

/** How long `envoy --version` may take (Envoy 1.40 answers in under 0.1 s). */
export const VERSION_TIMEOUT_MS = 5000;

/** `…  version: 9e55…/1.40.0/Clean/RELEASE/BoringSSL`: a commit, then the release. */
const VERSION_LINE = /\bversion: [0-9a-f]{7,64}\/(\d+\.\d+\.\d+[^/\s]*)\//;

/** Options of {@linkcode identifyEnvoy}. */
export interface IdentifyOptions {
  /** @default VERSION_TIMEOUT_MS */
  timeoutMs?: number;
  signal?: AbortSignal;
}

/**
 * Runs `<binary> --version` once and returns Envoy's release.
 *
 * @example
 * ```ts
 * await identifyEnvoy("/usr/local/bin/envoy"); // "1.40.0"
 * await identifyEnvoy("/bin/true"); // throws: Envoy binary /bin/true is not Envoy: …
 * ```
 * @throws {StartError} naming the path and what `--version` printed (or that it hung)
 */
export function identifyEnvoy(binary: string, options: IdentifyOptions = {}): Promise<string> {
  const timeoutMs = options.timeoutMs ?? VERSION_TIMEOUT_MS;
  return new Promise((resolve, reject) => {
    // Its own process group: a wrapper that hangs is stopped with whatever it started.
    const child = spawn(binary, ["--version"], {
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    let output = "";
    const keep = (chunk: unknown) => {
      if (output.length < 1 << 16) output += String(chunk);
    };
    child.stdout.on("data", keep);
    child.stderr.on("data", keep);
    let timedOut = false;
    const kill = () => {
      try {
        process.kill(-child.pid!, "SIGKILL");
      } catch { /* already gone, or no group kill in this runtime */ }
      child.kill("SIGKILL");
    };
    const timer = setTimeout(() => (timedOut = true, kill()), timeoutMs);
    const onAbort = () => kill();
    options.signal?.addEventListener("abort", onAbort, { once: true });
    const refuse = (how: string) =>
      reject(new StartError(`Envoy binary ${binary} is not Envoy: ${binary} --version ${how}`));
    child.on("error", (error) => {
      clearTimeout(timer);
      refuse(`failed: ${error.message}`);
    });
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      options.signal?.removeEventListener("abort", onAbort);
      if (options.signal?.aborted) return reject(options.signal.reason);
      const release = VERSION_LINE.exec(output)?.[1];
      if (release && code === 0) return resolve(release);
      const said = output.split("\n").map((l) => l.trim()).find(Boolean);
      const shown = said
        ? `printed "${said.length > 160 ? `${said.slice(0, 160)}…` : said}"`
        : "printed nothing";
      if (timedOut) return refuse(`did not answer within ${timeoutMs} ms`);
      refuse(code === 0 ? shown : `${shown} (${signal ? `signal ${signal}` : `exit ${code}`})`);
    });
  });
}
