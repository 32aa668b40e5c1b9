// The filter tests' name for the one seeded PRNG (mulberry32) of the test support: the same seed
// gives the same interleaving, so failures replay.
export { seededRandom as prng } from "../support/seeded-random.ts";
