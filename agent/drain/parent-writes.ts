// Whether a hot-restart parent still writes: its admin went to its child and a unix socket shows
// no queue, so what the process passes to write(2) is what tells that its unix connections may
// still carry bytes (agent/drain/delivery.ts). Read in the background from its drain on.
import type { Epoch } from "../supervise/envoys.ts";
import { bytesWritten } from "../envoy/sockets.ts";

/**
 * Each watched Envoy's bytes written when last read ({@linkcode bytesWritten}), since when it is
 * read, and when they were last seen growing.
 */
const writes = new WeakMap<Epoch, { bytes: number; since: number; lastAt?: number }>();
/** The Envoys whose writes are read in the background ({@linkcode watchWrites}). */
const watched = new WeakSet<Epoch>();
/** How often a watched Envoy's writes are read. */
const WRITES_SAMPLE_MS = 200;
/**
 * A hot-restart parent that wrote within this long may still hold bytes for its unix-socket
 * connections (Envoy writes to a slow reader as its socket drains: a reader fast enough to take
 * Envoy's last 1 MiB within the drain's 3 s tail drains it every half second or sooner).
 */
const WRITES_RECENT_MS = 1000;

/** Reads `live`'s bytes written once: its last write moves forward when they grew. */
async function readWrites(live: Epoch): Promise<void> {
  const bytes = await bytesWritten(live.process.pid);
  if (bytes === undefined) return;
  const at = Date.now();
  const before = writes.get(live);
  if (before && bytes < before.bytes) return; // a later reading landed first
  const lastAt = before && bytes > before.bytes ? at : before?.lastAt;
  writes.set(live, { bytes, since: before?.since ?? at, ...(lastAt ? { lastAt } : {}) });
}

/**
 * Reads `live`'s writes every {@linkcode WRITES_SAMPLE_MS} from now while it runs.
 *
 * @example
 * ```ts
 * watchWrites(parent); // as its drain begins
 * ```
 */
export function watchWrites(live: Epoch): void {
  if (watched.has(live)) return;
  watched.add(live);
  const timer = setInterval(() => {
    if (live.process.running) void readWrites(live);
    else clearInterval(timer);
  }, WRITES_SAMPLE_MS).unref();
  void readWrites(live);
}

/**
 * Whether `live` wrote anything within the last {@linkcode WRITES_RECENT_MS}; undefined when it
 * cannot tell (no /proc, or not watched that long).
 *
 * @example
 * ```ts
 * await wroteLately(parent); // true while it still writes to a slow reader
 * ```
 */
export async function wroteLately(live: Epoch): Promise<boolean | undefined> {
  watchWrites(live);
  await readWrites(live);
  const w = writes.get(live);
  const now = Date.now();
  if (w?.lastAt !== undefined) return now - w.lastAt < WRITES_RECENT_MS;
  return w && now - w.since >= WRITES_RECENT_MS ? false : undefined;
}
