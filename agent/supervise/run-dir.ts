// The run folder (`--run-dir`): made fresh on every start, 0700, its files 0600
// (docs/architecture.md says why).
import { chmod, lstat, mkdir, readdir, rm, stat, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { StartError } from "../lib/errors.ts";

/**
 * Names of what lastcall and its Envoys write into the run folder: the filter module copy,
 * bootstraps, Envoy's admin address and base id files, the idle-close pressure files, xDS
 * proxy sockets and LDS copies (with their temporary files). A new file in the run folder gets
 * its name here.
 */
export const RUN_DIR_FILES: readonly RegExp[] = [
  /^filter\.wasm$/,
  /^validate\.json$/,
  /^envoy-g\d+-epoch\d+\.json$/,
  /^envoy-g\d+-epoch\d+\.xds\.sock$/,
  /^envoy-g\d+-epoch\d+-lds\.(json|pb)(\.[0-9a-f]+\.tmp)?$/,
  /^admin-g\d+-epoch\d+$/,
  /^(validate|envoy-g\d+-epoch\d+)\.idle(\.next)?$/,
  /^base-id-g\d+$/,
];

/** Whether `name` is a file lastcall writes into its run folder. */
export function isRunDirFile(name: string): boolean {
  return RUN_DIR_FILES.some((pattern) => pattern.test(name));
}

/**
 * Makes `dir` a fresh run folder: created if missing, an earlier lastcall's files removed,
 * mode 0700.
 *
 * @example
 * ```ts
 * await prepareRunDir("/var/run/lastcall");
 * ```
 * @throws {StartError} naming the folder when it cannot be made (not a folder, not ours) or
 * when it holds something lastcall did not write
 */
export async function prepareRunDir(dir: string): Promise<void> {
  const fail = (why: string) => new StartError(`Cannot use --run-dir ${dir}: ${why}`);
  try {
    await makeFolder(dir);
  } catch (error) {
    throw fail((error as Error).message);
  }
  let entries: string[];
  try {
    if (!(await lstat(dir)).isDirectory()) throw new Error("not a folder");
    entries = await readdir(dir);
  } catch (error) {
    throw fail((error as Error).message);
  }
  const foreign: string[] = [];
  for (const name of entries) {
    const isFolder = await lstat(join(dir, name)).then((s) => s.isDirectory(), () => false);
    if (isRunDirFile(name) && !isFolder) continue;
    foreign.push(name);
  }
  if (foreign.length) {
    const shown = foreign.sort().slice(0, 3).join(", ") +
      (foreign.length > 3 ? `, … (${foreign.length} in all)` : "");
    throw fail(
      `it holds files lastcall did not write (${shown}); give lastcall a folder of its own`,
    );
  }
  try {
    await Promise.all(entries.map((name) => rm(join(dir, name), { force: true })));
    await chmod(dir, 0o700);
  } catch (error) {
    throw fail((error as Error).message);
  }
}

/**
 * Creates `dir` and its missing parents, 0700. Node's own `mkdir(…, { recursive: true })` loops
 * forever where a parent exists but refuses a child with ENOENT (`/proc/x`); this asks once per
 * level.
 */
async function makeFolder(dir: string): Promise<void> {
  try {
    await mkdir(dir, { mode: 0o700 });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "EEXIST") return;
    const parent = dirname(dir);
    if (code !== "ENOENT" || parent === dir || (await exists(parent))) throw error;
    await makeFolder(parent);
    await mkdir(dir, { mode: 0o700 }).catch((again: NodeJS.ErrnoException) => {
      if (again.code !== "EEXIST") throw again;
    });
  }
}

/** Whether anything is at `path` (a dangling link is nothing). */
function exists(path: string): Promise<boolean> {
  return stat(path).then(() => true, () => false);
}

/**
 * Writes a file only lastcall's user may read (bootstraps hold the report token): created
 * 0600, and made 0600 if it was there before with another mode.
 *
 * @example
 * ```ts
 * await writePrivateFile(join(runDir, "envoy-g1-epoch0.json"), text);
 * ```
 */
export async function writePrivateFile(path: string, data: string | Uint8Array): Promise<void> {
  await writeFile(path, data, { mode: 0o600 });
  await chmod(path, 0o600);
}
