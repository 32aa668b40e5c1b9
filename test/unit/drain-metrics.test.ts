// How drains ended, as /metrics shows it (agent/drain/drain-metrics.ts): the histograms and
// counters of the outcomes, and the gauges of the drains under way. Read through the exposition
// text, as Prometheus reads it.
import fc from "fast-check";
import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import {
  DRAIN_KINDS,
  DRAIN_SECONDS_BUCKETS,
  type DrainKind,
  DrainMetrics,
  type DrainOutcome,
} from "../../agent/drain/drain-metrics.ts";
import { createMetrics } from "../../agent/status/metrics.ts";
import { initialState } from "../../agent/state.ts";
import { parseSamples } from "../support/metrics-text.ts";

/** A DrainMetrics on its own registry, with a clock the test moves. */
function metered() {
  let clock = 1_000_000;
  const drains = new DrainMetrics({ now: () => clock });
  const registry = new Registry();
  drains.register(registry);
  return { drains, registry, advance: (ms: number) => (clock += ms), now: () => clock };
}

/** Every sample of the exposition text: `name{labels}` to value. */
async function samples(registry: Registry): Promise<Map<string, number>> {
  return parseSamples(await registry.metrics());
}

const ended = (
  reason: string,
  drainMs: number,
  inflightAtStop = 0,
): Omit<DrainOutcome, "kind"> => ({ reason, drainMs, inflightAtStop });

describe("outcomes", () => {
  it("a drain that ended on zero: one duration by kind and reason, nothing cut, its time from the last zero to the stop", async () => {
    const { drains, registry } = metered();
    drains.started("termination", () => 0).ended({
      reason: "inflight_zero",
      drainMs: 5200,
      inflightAtStop: 0,
      bytesUnsent: 0,
      lastZeroToStopMs: 3,
    });
    const s = await samples(registry);
    expect(
      s.get('lastcall_drain_duration_seconds_count{kind="termination",reason="inflight_zero"}'),
    ).toBe(1);
    expect(s.get('lastcall_drain_duration_seconds_sum{kind="termination",reason="inflight_zero"}'))
      .toBeCloseTo(5.2);
    expect(
      s.get(
        'lastcall_drain_duration_seconds_bucket{le="5",kind="termination",reason="inflight_zero"}',
      ),
    ).toBe(0);
    expect(
      s.get(
        'lastcall_drain_duration_seconds_bucket{le="10",kind="termination",reason="inflight_zero"}',
      ),
    ).toBe(1);
    expect(s.get('lastcall_requests_cut_total{kind="termination"}')).toBe(0);
    expect(s.get('lastcall_response_bytes_cut_total{kind="termination"}')).toBe(0);
    expect(s.get('lastcall_drain_last_response_to_stop_seconds_count{kind="termination"}')).toBe(1);
    expect(
      s.get('lastcall_drain_last_response_to_stop_seconds_bucket{le="0.005",kind="termination"}'),
    ).toBe(1);
    expect(
      s.get('lastcall_drain_last_response_to_stop_seconds_bucket{le="0.0025",kind="termination"}'),
    ).toBe(0);
  });

  it("a drain that hit its deadline: counted under `deadline`, its requests and bytes cut, no time from a last zero", async () => {
    const { drains, registry } = metered();
    drains.started("reload", () => 0).ended({
      reason: "deadline",
      drainMs: 600_000,
      inflightAtStop: 3,
      bytesUnsent: 81_920,
    });
    const s = await samples(registry);
    expect(s.get('lastcall_drain_duration_seconds_count{kind="reload",reason="deadline"}')).toBe(1);
    expect(
      s.get('lastcall_drain_duration_seconds_bucket{le="600",kind="reload",reason="deadline"}'),
    ).toBe(1);
    expect(
      s.get('lastcall_drain_duration_seconds_bucket{le="300",kind="reload",reason="deadline"}'),
    ).toBe(0);
    expect(s.get('lastcall_requests_cut_total{kind="reload"}')).toBe(3);
    expect(s.get('lastcall_response_bytes_cut_total{kind="reload"}')).toBe(81_920);
    expect(s.get('lastcall_drain_last_response_to_stop_seconds_count{kind="reload"}')).toBe(0);
  });

  it("before any drain, every kind's counters and last-zero histogram are there at 0 (rate() needs the first sample)", async () => {
    const { registry } = metered();
    const s = await samples(registry);
    for (const kind of DRAIN_KINDS) {
      expect(s.get(`lastcall_requests_cut_total{kind="${kind}"}`)).toBe(0);
      expect(s.get(`lastcall_response_bytes_cut_total{kind="${kind}"}`)).toBe(0);
      expect(s.get(`lastcall_drain_last_response_to_stop_seconds_count{kind="${kind}"}`)).toBe(0);
      expect(s.get(`lastcall_draining{kind="${kind}"}`)).toBe(0);
    }
    expect([...s.keys()].some((k) => k.startsWith("lastcall_drain_seconds_left"))).toBe(false);
  });

  it("an outcome is observed once; an end without one observes nothing", async () => {
    const { drains, registry } = metered();
    const drain = drains.started("drain", () => 0);
    drain.ended(ended("deadline", 1000));
    drain.ended(ended("deadline", 1000));
    drains.started("reload", () => 0).ended();
    const s = await samples(registry);
    expect(s.get('lastcall_drain_duration_seconds_count{kind="drain",reason="deadline"}')).toBe(1);
    expect([...s.keys()].some((k) => k.includes('kind="reload",reason='))).toBe(false);
  });

  it("a wall clock stepped back counts as 0 s, not as a negative duration", async () => {
    const { drains, registry } = metered();
    drains.observe({
      kind: "drain",
      reason: "inflight_zero",
      drainMs: -40,
      inflightAtStop: 0,
      lastZeroToStopMs: -1,
    });
    const s = await samples(registry);
    expect(s.get('lastcall_drain_duration_seconds_sum{kind="drain",reason="inflight_zero"}')).toBe(
      0,
    );
    expect(
      s.get(
        'lastcall_drain_duration_seconds_bucket{le="0.05",kind="drain",reason="inflight_zero"}',
      ),
    ).toBe(1);
  });

  it.each([
    [
      { kind: "restart" as DrainKind, reason: "x", drainMs: 1, inflightAtStop: 0 },
      'drain kind must be one of termination, reload, drain, not "restart"',
    ],
    [
      { kind: "drain" as DrainKind, reason: "", drainMs: 1, inflightAtStop: 0 },
      'drain reason must be a non-empty string, not ""',
    ],
    [
      { kind: "drain" as DrainKind, reason: "x", drainMs: 1, inflightAtStop: -1 },
      "inflightAtStop must be a whole number of at least 0, not -1",
    ],
    [
      { kind: "drain" as DrainKind, reason: "x", drainMs: 1, inflightAtStop: 0, bytesUnsent: 1.5 },
      "bytesUnsent must be a whole number of at least 0, not 1.5",
    ],
  ])("refuses %o, naming the value", (outcome, message) => {
    const { drains } = metered();
    expect(() => drains.observe(outcome)).toThrow(new RangeError(message));
  });

  it("refuses to start a drain of an unknown kind, naming it", () => {
    expect(() => metered().drains.started("quit" as DrainKind, () => 0)).toThrow(
      new RangeError('drain kind must be one of termination, reload, drain, not "quit"'),
    );
  });

  it("for any outcomes: counts by kind and reason, cut sums and cumulative buckets add up", async () => {
    const outcome = fc.record({
      kind: fc.constantFrom(...DRAIN_KINDS),
      reason: fc.constantFrom("inflight_zero", "deadline", "envoy_exited", "requests_zero"),
      drainMs: fc.integer({ min: 0, max: 700_000 }),
      inflightAtStop: fc.nat({ max: 1000 }),
      bytesUnsent: fc.option(fc.nat({ max: 1e9 }), { nil: undefined }),
    });
    await fc.assert(
      fc.asyncProperty(fc.array(outcome, { maxLength: 30 }), async (outcomes) => {
        const { drains, registry } = metered();
        for (const o of outcomes) drains.observe(o);
        const s = await samples(registry);
        for (const kind of DRAIN_KINDS) {
          const mine = outcomes.filter((o) => o.kind === kind);
          expect(s.get(`lastcall_requests_cut_total{kind="${kind}"}`)).toBe(
            mine.reduce((sum, o) => sum + o.inflightAtStop, 0),
          );
          expect(s.get(`lastcall_response_bytes_cut_total{kind="${kind}"}`)).toBe(
            mine.reduce((sum, o) => sum + (o.bytesUnsent ?? 0), 0),
          );
          for (const reason of new Set(mine.map((o) => o.reason))) {
            const these = mine.filter((o) => o.reason === reason);
            const labels = `kind="${kind}",reason="${reason}"`;
            expect(s.get(`lastcall_drain_duration_seconds_count{${labels}}`)).toBe(these.length);
            let previous = 0;
            for (const le of DRAIN_SECONDS_BUCKETS) {
              const n = s.get(`lastcall_drain_duration_seconds_bucket{le="${le}",${labels}}`)!;
              expect(n).toBe(these.filter((o) => o.drainMs / 1000 <= le).length);
              expect(n).toBeGreaterThanOrEqual(previous);
              previous = n;
            }
            expect(s.get(`lastcall_drain_duration_seconds_bucket{le="+Inf",${labels}}`)).toBe(
              these.length,
            );
          }
        }
      }),
      { numRuns: 50 },
    );
  });
});

describe("drains under way", () => {
  it("while one runs: draining 1 and the seconds to its deadline, falling as time passes, 0 past it; gone once it ended", async () => {
    const { drains, registry, advance, now } = metered();
    const deadline = now() + 28_000;
    const drain = drains.started("termination", () => deadline);
    let s = await samples(registry);
    expect(s.get('lastcall_draining{kind="termination"}')).toBe(1);
    expect(s.get('lastcall_draining{kind="reload"}')).toBe(0);
    expect(s.get('lastcall_drain_seconds_left{kind="termination"}')).toBe(28);
    advance(2500);
    s = await samples(registry);
    expect(s.get('lastcall_drain_seconds_left{kind="termination"}')).toBe(25.5);
    advance(30_000);
    s = await samples(registry);
    expect(s.get('lastcall_drain_seconds_left{kind="termination"}')).toBe(0);
    drain.ended(ended("deadline", 30_500, 1));
    s = await samples(registry);
    expect(s.get('lastcall_draining{kind="termination"}')).toBe(0);
    expect(s.has('lastcall_drain_seconds_left{kind="termination"}')).toBe(false);
  });

  it("a deadline moved later is followed (a termination after POST /drain takes its deadline from the signal)", async () => {
    const { drains, registry, now } = metered();
    const plan = { deadline: now() + 10_000 };
    drains.started("termination", () => plan.deadline);
    plan.deadline += 5000;
    expect((await samples(registry)).get('lastcall_drain_seconds_left{kind="termination"}')).toBe(
      15,
    );
  });

  it("two reload drains at once: draining 1 and the nearer deadline; 1 until both ended", async () => {
    const { drains, registry, now } = metered();
    const first = drains.started("reload", () => now() + 600_000);
    const second = drains.started("reload", () => now() + 120_000);
    expect((await samples(registry)).get('lastcall_drain_seconds_left{kind="reload"}')).toBe(120);
    second.ended(ended("inflight_zero", 10));
    let s = await samples(registry);
    expect(s.get('lastcall_draining{kind="reload"}')).toBe(1);
    expect(s.get('lastcall_drain_seconds_left{kind="reload"}')).toBe(600);
    first.ended(ended("inflight_zero", 20));
    s = await samples(registry);
    expect(s.get('lastcall_draining{kind="reload"}')).toBe(0);
  });

  it("a termination takes over a POST /drain under way: the drain's own end is then not observed", async () => {
    const { drains, registry, now } = metered();
    const drain = drains.started("drain", () => now() + 28_000);
    const termination = drains.started("termination", () => now() + 28_000);
    let s = await samples(registry);
    expect(s.get('lastcall_draining{kind="drain"}')).toBe(0);
    expect(s.get('lastcall_draining{kind="termination"}')).toBe(1);
    drain.ended(ended("deadline", 28_000));
    termination.ended(ended("inflight_zero", 29_000));
    s = await samples(registry);
    expect([...s.keys()].some((k) => k.includes('kind="drain",reason='))).toBe(false);
    expect(
      s.get('lastcall_drain_duration_seconds_count{kind="termination",reason="inflight_zero"}'),
    ).toBe(1);
  });
});

describe("in /metrics", () => {
  it("createMetrics registers them beside the agent's gauges", async () => {
    const drains = new DrainMetrics();
    const registry = createMetrics({
      state: () => initialState(),
      inflight: () => 0,
      ready: () => true,
      reports: () => ({ accepted: 0, stale: 0, unknown: 0, refused: 0 }),
      drains,
    });
    drains.started("drain", () => Date.now() + 1000).ended({
      reason: "inflight_zero",
      drainMs: 12,
      inflightAtStop: 0,
    });
    const s = await samples(registry);
    expect(s.get("lastcall_ready")).toBe(1);
    expect(s.get('lastcall_drain_duration_seconds_count{kind="drain",reason="inflight_zero"}'))
      .toBe(1);
    expect(s.get('lastcall_draining{kind="drain"}')).toBe(0);
  });

  it("types every *_total as a counter (rate() and increase() apply), with the state's totals, at each scrape", async () => {
    const state = initialState();
    const source = {
      state: () => state,
      inflight: () => 0,
      ready: () => true,
      reports: () => ({ accepted: 7, stale: 0, unknown: 0, refused: 2 }),
      xds: () => ({
        streamsActive: 1,
        streamsTotal: 3,
        responses: { listener: 4 },
        listenersRewritten: 2,
        nacks: { lastcall: 0, control_plane: 1 },
        upstreamErrors: 0,
        filesWritten: 0,
      }),
      drains: new DrainMetrics(),
    };
    const registry = createMetrics(source);
    state.restarts = 2;
    const text = await registry.metrics();
    const totals = [...text.matchAll(/^# TYPE (\S+_total) (\S+)$/gm)];
    expect(totals.length).toBeGreaterThan(10);
    for (const [line, , type] of totals) expect(type, line).toBe("counter");
    const s = await samples(registry);
    expect(s.get("lastcall_envoy_restarts_total")).toBe(2);
    expect(s.get("lastcall_filter_refused_reports_total")).toBe(2);
    expect(s.get('lastcall_xds_responses_total{type="listener"}')).toBe(4);
    expect(s.get('lastcall_xds_nacks_total{cause="control_plane"}')).toBe(1);
    state.restarts = 3; // read again at the next scrape, not added to
    expect((await samples(registry)).get("lastcall_envoy_restarts_total")).toBe(3);
    expect(s.get("lastcall_envoy_processes")).toBe(0);
    expect(text).toMatch(/^# TYPE lastcall_envoy_processes gauge$/m);
  });
});
