// The slow download of the delivery tests (delivery*.test.ts): a phone on a poor link reading a
// large body, so its tail is still on its way when lastcall is told to stop; and two reloads
// under it.
import type { LastcallEvent, TestLastcall } from "../support/lastcall.ts";

/** Body bytes of the slow download: 30 MB. */
export const BODY = 30_000_000;
/** The slow reader's rate, bytes per second: 3 MB/s (SIGTERM comes after 1 s of it). */
export const RATE = 3_000_000;

/**
 * Two hot restarts under a download on epoch 0: the second waits for epoch 0's drain, then ends
 * it (Envoy ends a grandparent as its child starts). Resolves with what the reader read and epoch
 * 0's `epoch_drained`, once epoch 2 runs.
 */
export async function acrossTwoHotRestarts<Read>(
  lc: TestLastcall,
  download: { reached(bytes: number): Promise<void>; done: Promise<Read> },
): Promise<{ read: Read; drained: LastcallEvent }> {
  await download.reached(RATE);
  lc.signal("SIGHUP");
  await lc.event("epoch", (e) => e.epoch === 1);
  lc.signal("SIGHUP");
  const read = await download.done;
  const drained = await lc.event("epoch_drained", (e) => (e.epochs as number[])[0] === 0, 30_000);
  await lc.event("epoch", (e) => e.epoch === 2);
  return { read, drained };
}
