// `GET /healthz/ready?wait_ms=N`, the injected sidecar's probe: a starting Envoy is waited for
// (so the kubelet's first probe can pass), a drain is not; a wait that is no whole number of
// milliseconds up to 5000 is refused, naming the value.
import fc from "fast-check";
import { describe, expect, it, vi } from "vitest";
import {
  createStatusApp,
  READY_WAIT_MAX_MS,
  type StatusControls,
} from "../../agent/status/routes.ts";

/** Controls whose readiness answers `answers` in turn, then the last one forever. */
function controlsAnswering(...answers: { ready: boolean; reason: string }[]) {
  let call = 0;
  return {
    readiness: vi.fn(() => Promise.resolve(answers[Math.min(call++, answers.length - 1)])),
    state: vi.fn(() => ({}) as ReturnType<StatusControls["state"]>),
    metrics: vi.fn(() => Promise.resolve("")),
    reportToken: "t".repeat(32),
    report: vi.fn(() => Promise.resolve({ draining: false })),
    quit: vi.fn(),
    drain: vi.fn(),
    connectionMaker: vi.fn(() => Promise.resolve(({ kind: "other" }) as const)),
  } satisfies StatusControls;
}

const starting = { ready: false, reason: "Envoy epoch 0 starting: PRE_INITIALIZING" };
const live = { ready: true, reason: "LIVE" };

describe("GET /healthz/ready?wait_ms", () => {
  it("waits for a starting Envoy, and answers 200 once it is ready", async () => {
    const controls = controlsAnswering(starting, starting, starting, live);
    const res = await createStatusApp(controls).request("/healthz/ready?wait_ms=900");
    expect({ status: res.status, body: await res.json() }).toEqual({ status: 200, body: live });
    expect(controls.readiness).toHaveBeenCalledTimes(4);
  });

  it("without wait_ms, answers what it sees at once", async () => {
    const controls = controlsAnswering(starting, live);
    const res = await createStatusApp(controls).request("/healthz/ready");
    expect({ status: res.status, body: await res.json() }).toEqual({ status: 503, body: starting });
    expect(controls.readiness).toHaveBeenCalledTimes(1);
  });

  it("a drain is answered at once: it does not end by waiting", async () => {
    const controls = controlsAnswering({ ready: false, reason: "draining" }, live);
    const res = await createStatusApp(controls).request("/healthz/ready?wait_ms=900");
    expect(res.status).toBe(503);
    expect(controls.readiness).toHaveBeenCalledTimes(1);
  });

  it("once ready, a restarting Envoy is said at once: only lastcall's first start is waited for", async () => {
    const controls = controlsAnswering(live, starting, live);
    const app = createStatusApp(controls);
    expect((await app.request("/healthz/ready?wait_ms=2900")).status).toBe(200);
    const res = await app.request("/healthz/ready?wait_ms=2900");
    expect({ status: res.status, body: await res.json() }).toEqual({ status: 503, body: starting });
    expect(controls.readiness).toHaveBeenCalledTimes(2);
  });

  it("an Envoy that never gets ready: 503 with the last reason once the wait is over", async () => {
    const controls = controlsAnswering(starting);
    const res = await createStatusApp(controls).request("/healthz/ready?wait_ms=120");
    expect({ status: res.status, body: await res.json() }).toEqual({ status: 503, body: starting });
    expect(controls.readiness.mock.calls.length).toBeGreaterThan(1);
  });

  it("takes every whole number of milliseconds up to the most", async () => {
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 0, max: READY_WAIT_MAX_MS }), async (ms) => {
        const res = await createStatusApp(controlsAnswering(live)).request(
          `/healthz/ready?wait_ms=${ms}`,
        );
        expect(res.status).toBe(200);
      }),
      { numRuns: 50 },
    );
  });

  it("refuses anything else with 400, naming the value", async () => {
    const bad = fc.oneof(
      fc.string().filter((s) => !/^\d{1,5}$/.test(s) || Number(s) > READY_WAIT_MAX_MS),
      fc.integer({ min: READY_WAIT_MAX_MS + 1, max: 10 ** 9 }).map(String),
      fc.constantFrom("-1", "1.5", "1e3", " 5", "0x10", ""),
    );
    await fc.assert(
      fc.asyncProperty(bad, async (text) => {
        const res = await createStatusApp(controlsAnswering(live)).request(
          `/healthz/ready?wait_ms=${encodeURIComponent(text)}`,
        );
        expect(res.status).toBe(400);
        expect(await res.json()).toEqual({
          error:
            `wait_ms "${text}" is not a whole number of milliseconds from 0 to ${READY_WAIT_MAX_MS}`,
        });
      }),
      { numRuns: 100 },
    );
  });
});
