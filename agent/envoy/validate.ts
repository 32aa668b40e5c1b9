import { execFile } from "node:child_process";

/** The outcome of `envoy --mode validate`. */
export interface Validation {
  ok: boolean;
  /** Envoy's own error lines when not ok. */
  errors: string[];
}

/**
 * Checks a config with `envoy --mode validate`, which loads everything (the wasm filter
 * included) without serving. Used before every start and every hot restart.
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
): Promise<Validation> {
  return new Promise((resolve, reject) => {
    execFile(
      binary,
      ["--mode", "validate", "-c", configPath, "--disable-hot-restart", "-l", "error"],
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
