// One process at a time: a lock directory (mkdir is atomic) holding its owner's pid. A lock
// whose owner is gone is taken over, so a build killed half-way does not block the next one.
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";

/**
 * Runs `task` holding the lock directory `dir`; waits for another holder at most `waitMs`.
 *
 * @example
 * await withLock(".cache/image/build.lock", () => build(), { what: "the image build lock", waitMs: 30 * 60_000 });
 * @param {string} dir
 * @param {() => Promise<T> | T} task
 * @param {{ what?: string, waitMs?: number, pollMs?: number }} [options]
 * @returns {Promise<T>}
 * @template T
 */
export async function withLock(
  dir,
  task,
  { what = `the lock ${dir}`, waitMs = 30 * 60_000, pollMs = 250 } = {},
) {
  mkdirSync(dirname(dir), { recursive: true });
  const owner = join(dir, "pid");
  for (const until = Date.now() + waitMs;;) {
    try {
      mkdirSync(dir);
      writeFileSync(owner, String(process.pid));
      break;
    } catch (error) {
      if (error.code !== "EEXIST") throw error;
      let pid = 0;
      try {
        pid = Number(readFileSync(owner, "utf8"));
      } catch {
        // being created or removed: look again
      }
      if (pid > 0 && !alive(pid)) rmSync(dir, { recursive: true, force: true });
      else if (Date.now() > until) {
        throw new Error(`Timed out waiting for ${what} ${dir} (held by pid ${pid})`);
      } else await new Promise((done) => setTimeout(done, pollMs));
    }
  }
  try {
    return await task();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Whether process `pid` exists (EPERM: it does, owned by someone else). */
export function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return error.code === "EPERM";
  }
}
