// Watched files (`--watch`): one call per burst of real changes, naming the files that changed.
import { createHash } from "node:crypto";
import { existsSync, type FSWatcher, watch } from "node:fs";
import { readFile } from "node:fs/promises";
import { basename, dirname, resolve } from "node:path";
import { StartError } from "./errors.ts";

/** Options of {@linkcode watchFiles}. */
export interface WatchOptions {
  /** Quiet time that ends a burst of events. @default 250 */
  settleMs?: number;
}

/** Each file's content hash (a missing file has one of its own). */
async function fingerprints(paths: readonly string[]): Promise<Map<string, string>> {
  const hashes = new Map<string, string>();
  for (const path of paths) {
    const content = await readFile(path).catch(() => Buffer.from("\0missing"));
    hashes.set(path, createHash("sha256").update(content).digest("hex"));
  }
  return hashes;
}

/**
 * Calls `onChange` once per burst of changes to `paths` whose content really changed, with those
 * files only.
 * Watches the parent folders, because editors and Kubernetes secret updates replace files
 * (rename, symlink swap) rather than writing them in place. Returns a function that stops.
 *
 * @example
 * ```ts
 * const stop = await watchFiles(["/etc/envoy/envoy.yaml"], (changed) => reload(changed));
 * ```
 */
export async function watchFiles(
  paths: readonly string[],
  onChange: (paths: string[]) => void,
  options: WatchOptions = {},
): Promise<() => void> {
  const settleMs = options.settleMs ?? 250;
  const files = paths.map((p) => resolve(p));
  let last = await fingerprints(files);
  let timer: ReturnType<typeof setTimeout> | undefined;
  const watchers: FSWatcher[] = [];
  const names = new Set(files.map((f) => basename(f)));
  const settle = () => {
    clearTimeout(timer);
    timer = setTimeout(async () => {
      const now = await fingerprints(files);
      const changed = files.filter((f) => now.get(f) !== last.get(f));
      last = now;
      if (changed.length > 0) onChange(changed);
    }, settleMs);
  };
  for (const dir of new Set(files.map((f) => dirname(f)))) {
    if (!existsSync(dir)) {
      const watched = files.filter((f) => dirname(f) === dir).join(", ");
      throw new StartError(`Cannot watch ${watched}: no folder ${dir}`);
    }
    const watcher = watch(dir, (_event, name) => {
      // Kubernetes swaps a `..data` symlink; other names are our files themselves.
      if (!name || names.has(String(name)) || String(name).startsWith("..")) settle();
    });
    watcher.on("error", () => {});
    watchers.push(watcher);
  }
  return () => {
    clearTimeout(timer);
    for (const w of watchers) w.close();
  };
}
