import { readSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { YAMLError } from "yaml";
import { ManifestError } from "../k8s/manifest.ts";
import { writeErr } from "../runtime/process.ts";

/** Exit code of `inject` and `check` when the input cannot be read or is not YAML. */
export const EXIT_UNREADABLE = 2;

/** How messages name the input: the path, or `stdin` for `-`. */
export function inputName(path: string): string {
  return path === "-" ? "stdin" : path;
}

/** Reads a manifest file, or standard input for `-`. */
export function readInput(path: string): Promise<string> {
  return path === "-" ? Promise.resolve(readStandardInput()) : readFile(path, "utf8");
}

/**
 * Reads file descriptor 0 to its end. The runtime module imports `node:process`, which sets up
 * `process.stdin` and with it puts a pipe or socket on fd 0 in non-blocking mode: reads then
 * fail with EAGAIN until data arrives, so they are retried after a short pause.
 */
function readStandardInput(): string {
  const chunks: Uint8Array[] = [];
  const buffer = new Uint8Array(1 << 16);
  const pause = new Int32Array(new SharedArrayBuffer(4));
  for (;;) {
    let n: number;
    try {
      n = readSync(0, buffer, 0, buffer.length, null);
    } catch (error) {
      if ((error as { code?: string }).code !== "EAGAIN") throw error;
      Atomics.wait(pause, 0, 0, 10);
      continue;
    }
    if (n === 0) break;
    chunks.push(buffer.slice(0, n));
  }
  const all = new Uint8Array(chunks.reduce((sum, c) => sum + c.length, 0));
  chunks.reduce((at, c) => (all.set(c, at), at + c.length), 0);
  return new TextDecoder().decode(all);
}

/**
 * Runs `work` on the text of `path`; a read error or a YAML error becomes one line,
 * `lastcall: cannot read FILE: document 2, line 7: …`, and exit code 2.
 */
export async function withManifest(path: string, work: (text: string) => number): Promise<number> {
  let text: string;
  try {
    text = await readInput(path);
  } catch (error) {
    writeErr(`lastcall: cannot read ${inputName(path)}: ${(error as Error).message}`);
    return EXIT_UNREADABLE;
  }
  try {
    return work(text);
  } catch (error) {
    // A YAML error readManifest did not see first is still the input's fault: one line too.
    if (!(error instanceof ManifestError) && !(error instanceof YAMLError)) throw error;
    writeErr(`lastcall: cannot read ${inputName(path)}: ${error.message.split("\n")[0]}`);
    return EXIT_UNREADABLE;
  }
}
