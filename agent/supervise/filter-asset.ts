// Finds the in-flight filter module: an explicit path, the copy embedded in the single
// executable (written out once, since Envoy loads it from a file), or dist/ beside the code.
import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { writePrivateFile } from "./run-dir.ts";
import { StartError } from "../lib/errors.ts";

// The bundles' require() (the single executable's knows the built-in modules only); import()
// fails in the executable, whose code is cached. Undefined in the sources' ESM and under Deno.
declare const require: ((id: string) => unknown) | undefined;

function embedded(): ArrayBuffer | undefined {
  try {
    const sea = typeof require === "function"
      ? require("node:sea") as typeof import("node:sea")
      : undefined;
    return sea?.isSea() ? sea.getAsset("filter.wasm") : undefined;
  } catch {
    return undefined; // not Node's single executable (or not Node at all)
  }
}

/** filter.wasm beside the code (the bundle's dist/, or dist/ from the sources). */
function besideCode(): string {
  const candidates = [
    new URL("./filter.wasm", import.meta.url),
    new URL("../../dist/filter.wasm", import.meta.url),
  ]
    .map((url) => fileURLToPath(url));
  const found = candidates.find((path) => existsSync(path));
  if (!found) {
    throw new Error(
      `Filter module not found: looked at ${
        candidates.join(", ")
      } (run npm run build:filter, or pass --filter-wasm)`,
    );
  }
  return found;
}

/**
 * Returns a file path of filter.wasm that Envoy can load.
 *
 * @example
 * ```ts
 * const wasm = await filterWasmPath(undefined, runDir); // dist/filter.wasm, or runDir/filter.wasm
 * ```
 * @param explicit `--filter-wasm`, if given
 * @param runDir where an embedded copy is written (0600)
 * @throws when no filter module can be found, naming the places looked at
 */
export async function filterWasmPath(
  explicit: string | undefined,
  runDir: string,
): Promise<string> {
  if (explicit) {
    if (!existsSync(explicit)) throw new StartError(`Filter module not found: ${explicit}`);
    return explicit;
  }
  const asset = embedded();
  if (asset) {
    const path = join(runDir, "filter.wasm");
    await writePrivateFile(path, new Uint8Array(asset));
    return path;
  }
  return besideCode();
}

/**
 * The bytes of the filter lastcall ships (embedded in the single executable, or beside the
 * code), for a bootstrap that carries the module inline and needs no file.
 *
 * @example
 * ```ts
 * const code = { local: { inline_bytes: Buffer.from(await filterWasmBytes()).toString("base64") } };
 * ```
 * @throws when no filter module can be found, naming the places looked at
 */
export async function filterWasmBytes(): Promise<Uint8Array> {
  const asset = embedded();
  return asset ? new Uint8Array(asset) : new Uint8Array(await readFile(besideCode()));
}
