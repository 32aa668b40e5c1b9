// The connections Envoy closed holding a client's unread bytes (a request sent into its delayed
// close), told apart from requests it read and served between two looks.
import { describe, expect, it } from "vitest";
import { UnreadResets } from "../../agent/drain/delivery.ts";
import type { Undelivered } from "../../agent/envoy/sockets.ts";

/** One look at the connections: inode → unread bytes. */
const look = (unread: Array<[number, number]>): Undelivered => ({
  connections: unread.length,
  sending: 0,
  bytes: 0,
  unread: new Map(unread),
});

describe("UnreadResets", () => {
  it("counts a connection unread at two looks in a row, then gone", () => {
    const resets = new UnreadResets();
    for (const l of [[[7, 0]], [[7, 80]], [[7, 80]], [[7, 80]], []] as Array<[number, number]>[]) {
      resets.look(look(l));
    }
    expect(resets.count).toBe(1);
  });

  it("does not count a request read and served: unread at one look, then read (open or closed)", () => {
    const resets = new UnreadResets();
    const looks: Array<[number, number]>[] = [[[1, 80], [2, 80]], [[1, 0]], [], [[3, 80], [4, 80]]];
    for (const l of looks) resets.look(look(l));
    resets.look(look([[3, 80], [4, 0]]));
    resets.look(look([[3, 0], [4, 0]]));
    resets.look(look([]));
    expect(resets.count).toBe(0);
  });

  it("counts nothing from a look that could not be made (no /proc)", () => {
    const resets = new UnreadResets();
    resets.look(look([[5, 80]]));
    resets.look(look([[5, 80]]));
    resets.look(undefined);
    expect(resets.count).toBe(0);
    resets.look(look([]));
    expect(resets.count).toBe(1);
  });
});
