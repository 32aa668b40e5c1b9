import { execFile } from "node:child_process";

/** The outcome of `envoy --mode validate`. */
export interface Validation {
  ok: boolean;
  /** Envoy's own error lines when not ok. */
  errors: string[];
}

/**
 * Checks a config with `envoy --mode validate`, which loads everything (the wasm filter
 * included) without serving, with the arguments lastcall passes Envoy after `--` (`args`): an
 * unknown flag or a bad `-l` fails here too. Used before every hot restart, and when a start
 * fails or is slow.
 *
 * @example
 * ```ts
 * const { ok, errors } = await validateConfig("/usr/bin/envoy", "/run/envoy.json");
 * ```
 */
export function validateConfig(
  binary: string,
  configPath: string,
  signal?: AbortSignal,
  args: readonly string[] = [],
): Promise<Validation> {
  // The user's log level, when given, replaces this check's (Envoy refuses -l twice).
  const level = args.some((a) => /^(-l|--log-level)(=|$)/.test(a)) ? [] : ["-l", "error"];
  return new Promise((resolve, reject) => {
    execFile(
      binary,
      ["--mode", "validate", "-c", configPath, "--disable-hot-restart", ...level, ...args],
      { encoding: "utf8", maxBuffer: 16 * 1024 * 1024, signal, killSignal: "SIGKILL" },
      (error, stdout, stderr) => {
        if (signal?.aborted) return reject(signal.reason);
        if (!error) return resolve({ ok: true, errors: [] });
        const lines = `${stderr}\n${stdout}`.split("\n").map((l) => l.trim()).filter(Boolean);
        const errors = lines.filter((l) => /error|critical|invalid|exception|unable|fail/i.test(l));
        resolve({
          ok: false,
          errors: errors.length ? errors : lines.length ? lines : [error.message],
        });
      },
    );
  });
}
