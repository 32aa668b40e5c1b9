// Temporary folders of the tests: one root per run, one folder per test file, so the run leaves the
// system's temp folder as it found it.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** Where the run's root is kept for the test files (set by the global setup, inherited). */
const ROOT_VARIABLE = "LASTCALL_TEST_TMP_ROOT";

const registered = new Set<string>();

/**
 * A fresh folder in the current temp folder, removed with the test file's folder (or by
 * {@linkcode removeTempDirs}).
 *
 * @example
 * ```ts
 * const dir = tempDir("lastcall-lds-");
 * writeFileSync(join(dir, "lds.json"), text);
 * ```
 */
export function tempDir(prefix = "lastcall-test-"): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  registered.add(dir);
  return dir;
}

/** Removes every folder {@linkcode tempDir} made (and the file's folder), whatever is in them. */
export function removeTempDirs(): void {
  for (const dir of registered) rmSync(dir, { recursive: true, force: true });
  registered.clear();
}

/**
 * For the global setup: makes the run's root, points TMPDIR at it (for every worker and what
 * it starts), and returns the teardown that removes it.
 *
 * @example
 * ```ts
 * export default function setup() { return createRunTempRoot(); }
 * ```
 */
export function createRunTempRoot(): () => void {
  const previous = process.env.TMPDIR;
  const root = mkdtempSync(join(tmpdir(), "lastcall-t-"));
  process.env[ROOT_VARIABLE] = root;
  process.env.TMPDIR = root;
  return () => {
    rmSync(root, { recursive: true, force: true });
    if (previous === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = previous;
  };
}

/**
 * For each test file (a setup file): gives the file its own folder in the run's root and points
 * TMPDIR at it. Returns the folder, registered for {@linkcode removeTempDirs}.
 */
export function useFileTempDir(): string {
  const base = process.env[ROOT_VARIABLE] ?? tmpdir();
  const dir = mkdtempSync(join(base, base === process.env[ROOT_VARIABLE] ? "f-" : "lastcall-f-"));
  registered.add(dir);
  process.env.TMPDIR = dir;
  return dir;
}
