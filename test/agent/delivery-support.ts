// The slow download of the delivery tests (delivery*.test.ts): a phone on a poor link reading a
// large body, so its tail is still on its way when lastcall is told to stop.

/** Body bytes of the slow download: 30 MB. */
export const BODY = 30_000_000;
/** The slow reader's rate, bytes per second: 3 MB/s (SIGTERM comes after 1 s of it). */
export const RATE = 3_000_000;
