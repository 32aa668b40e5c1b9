// This VM's live streams for the holders of a drain: a direct-mapped table of stream ids, and a
// count of its counted streams.
import { keptTable, releaseKept } from "./kept";

/** Slots in the table (a power of two). */
export const LIVE_SLOTS: i32 = 16384;
const MASK: u32 = 16383;

// Zeroed once when the module starts: a fresh block of the allocator may hold old bytes.
const table: usize = __alloc((LIVE_SLOTS as usize) << 2, 0);
memory.fill(table, 0, (LIVE_SLOTS as usize) << 2);

/** This VM's counted live streams (an excluded path leaves at its request headers). */
export let vmInflight: u32 = 0;

/** A counted stream began: it takes its slot if the slot is free. */
export function liveStart(id: u32): void {
  const slot = table + ((id & MASK) << 2);
  if (load<u32>(slot) == 0) store<u32>(slot, id);
  vmInflight++;
}

/**
 * A counted stream left the count (deletion, or an excluded path): its slot is freed if it holds
 * it, with what was kept of its request (kept.ts) once a VM has kept any: the only cost of
 * `holder_paths` to a VM without it is that one branch.
 */
export function liveEnd(id: u32): void {
  const slot = table + ((id & MASK) << 2);
  if (load<u32>(slot) == id) {
    store<u32>(slot, 0);
    if (keptTable != 0) releaseKept(id);
  }
  vmInflight--;
}

/** Whether stream `id` holds its slot (it is tracked, so it can be named). */
export function ownsSlot(id: u32): bool {
  return load<u32>(table + ((id & MASK) << 2)) == id;
}

/**
 * The `n` smallest (oldest: a VM's context ids grow) tracked live ids, smallest first. Reads
 * the whole table: only when the agent asks, during a drain.
 */
export function oldestLive(n: i32): u32[] {
  const ids = new Array<u32>(0);
  if (n <= 0) return ids;
  for (let i = 0; i < LIVE_SLOTS; i++) {
    const id = load<u32>(table + ((i as usize) << 2));
    if (id == 0) continue;
    const size = ids.length;
    if (size == n && id >= ids[size - 1]) continue;
    if (size < n) ids.push(id);
    // Insertion: shift the larger ones up one place (dropping the largest when full).
    let at = size < n ? size : size - 1;
    while (at > 0 && ids[at - 1] > id) {
      ids[at] = ids[at - 1];
      at--;
    }
    ids[at] = id;
  }
  return ids;
}
