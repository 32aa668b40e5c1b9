// A small seeded PRNG for tests that pick things at random (an order, batch sizes): the seed is
// printed when the test fails, and `TEST_SEED=<seed>` replays exactly that run (not a
// `LASTCALL_*` name: those are lastcall's flags, and the lastcalls a test starts inherit them).

/** A random number source in [0, 1). */
export type Random = () => number;

/**
 * The seed of this run: `TEST_SEED` when set (a whole number), else a fresh one.
 *
 * @example
 * ```ts
 * const seed = testSeed(); // 2654435761
 * ```
 * @throws {RangeError} naming the value when `TEST_SEED` is not a whole number
 */
export function testSeed(): number {
  const text = process.env.TEST_SEED;
  if (text === undefined || text === "") return Math.floor(Math.random() * 2 ** 32);
  if (!/^\d+$/.test(text) || Number(text) >= 2 ** 32) {
    throw new RangeError(
      `TEST_SEED must be a whole number below 2^32, not ${JSON.stringify(text)}`,
    );
  }
  return Number(text);
}

/**
 * Mulberry32: the same seed gives the same sequence, on every platform.
 *
 * @example
 * ```ts
 * const random = seededRandom(42);
 * random(); // 0.6011037519201636
 * ```
 */
export function seededRandom(seed: number): Random {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * A shuffled copy of `items` (Fisher–Yates).
 *
 * @example
 * ```ts
 * shuffled([1, 2, 3], seededRandom(1)); // some order of 1, 2, 3
 * ```
 */
export function shuffled<T>(items: readonly T[], random: Random): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

/**
 * Splits `items`, in their order, into `count` non-empty batches of random sizes.
 *
 * @example
 * ```ts
 * randomBatches([1, 2, 3, 4, 5], 2, seededRandom(7)); // e.g. [[1], [2, 3, 4, 5]]
 * ```
 * @throws {RangeError} when `count` is not between 1 and the number of items
 */
export function randomBatches<T>(items: readonly T[], count: number, random: Random): T[][] {
  if (!Number.isInteger(count) || count < 1 || count > items.length) {
    throw new RangeError(`Cannot split ${items.length} items into ${count} non-empty batches`);
  }
  // count − 1 distinct cut points among the items.length − 1 gaps.
  const gaps = shuffled(Array.from({ length: items.length - 1 }, (_, i) => i + 1), random).slice(
    0,
    count - 1,
  ).sort((a, b) => a - b);
  const cuts = [0, ...gaps, items.length];
  return cuts.slice(1).map((end, i) => items.slice(cuts[i], end));
}
