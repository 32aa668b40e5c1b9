import { readFile } from "node:fs/promises";
import { YAMLError } from "yaml";
import { ManifestError } from "../k8s/manifest.ts";
import { readStandardInput, writeErr } from "../runtime/process.ts";

/** Exit code of `inject` and `check` when the input cannot be read or is not YAML. */
export const EXIT_UNREADABLE = 2;

/** How messages name the input: the path, or `stdin` for `-`. */
export function inputName(path: string): string {
  return path === "-" ? "stdin" : path;
}

/** Reads a manifest file, or standard input for `-`. */
export function readInput(path: string): Promise<string> {
  return path === "-" ? readStandardInput() : readFile(path, "utf8");
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
