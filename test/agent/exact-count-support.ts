// Helpers of the exact-count tests (exact-count*.test.ts): a seeded PRNG per test, and the check
// that Envoy's, the filter's and the agent's counts all equal the number of requests still held.
import { expect, onTestFailed } from "vitest";
import type { Outcome } from "../filter/clients.ts";
import { agentCountAfterReports, envoyCounts } from "../support/counts.ts";
import { waitFor } from "../support/envoy.ts";
import { type HeldClient, heldId } from "../support/held-clients.ts";
import type { TestLastcall } from "../support/lastcall.ts";
import { type Random, seededRandom, testSeed } from "../support/seeded-random.ts";
import type { UpstreamApp } from "../support/upstream-app.ts";

/** A held request's outcome once the app answered it. */
export const completed: Outcome = { status: 200, reset: false };

/** A seeded PRNG for this test; its seed is printed if the test fails. */
export function randomForTest(): { seed: number; random: Random } {
  const seed = testSeed();
  onTestFailed(() => console.error(`exact-count: seed ${seed} (replay with TEST_SEED=${seed})`));
  return { seed, random: seededRandom(seed) };
}

/** Where the counts are read. */
export interface Counted {
  lc: TestLastcall;
  status: string;
  /** Filter VMs that send heartbeats: each worker's and the main thread's, in every process. */
  vms: number;
}

/** The checks of a test file on its upstream `app` (one per file: upstreamForFile). */
export interface CountChecks {
  /**
   * Waits until Envoy is quiescent with `expected` requests in flight (the app holds exactly
   * those, and Envoy's own count says so), then checks that Envoy's count and the filter's gauge,
   * read together, and the agent's count after a heartbeat all equal `expected`.
   */
  countsAre(c: Counted, expected: number, step: string): Promise<void>;
  /** Answers the held requests whose ids are in `ids`; resolves with their client outcomes. */
  release(clients: Map<number, HeldClient>, ids: readonly number[]): Promise<Outcome[]>;
}

/** {@linkcode CountChecks} on `app`. */
export function countChecks(app: UpstreamApp): CountChecks {
  async function countsAre(c: Counted, expected: number, step: string): Promise<void> {
    await app.until((a) => a.held === expected && a.inflight === expected);
    const admin = c.lc.adminUrl();
    await waitFor(
      async () => ((await envoyCounts(admin)).rqActive === expected ? true : undefined),
      { what: `Envoy's downstream_rq_active to be ${expected} (${step})` },
    );
    // Read again: Envoy lowers its count as a stream completes, the filter a moment later, as the
    // stream is deleted; by this second read the last stream to leave is gone from both.
    const envoy = await envoyCounts(admin);
    expect({ step, rqActive: envoy.rqActive, gauge: envoy.gauge }).toEqual({
      step,
      rqActive: expected,
      gauge: expected,
    });
    expect({ step, agent: await agentCountAfterReports(c.status, c.vms + 1) }).toEqual({
      step,
      agent: expected,
    });
  }

  async function release(
    clients: Map<number, HeldClient>,
    ids: readonly number[],
  ): Promise<Outcome[]> {
    const set = new Set(ids);
    expect(app.releaseWhere((request) => set.has(heldId(request)))).toBe(ids.length);
    return await Promise.all(ids.map((id) => clients.get(id)!.outcome));
  }

  return { countsAre, release };
}
