// Answers of `GET /v1/state` in the shape lastcall gives them (agent/status/serve.ts; the `drain`
// object, agent/drain/waiting.ts), for `lastcall status` tests that need a state a
// real lastcall shows only for a moment, and exact numbers in it.

/** The moment the drain of {@linkcode drainingState} began. */
export const DRAIN_STARTED_AT = Date.parse("2025-01-15T10:00:00.000Z");

/**
 * A lastcall 12.3 s into a SIGTERM drain with a 30 s deadline (17.7 s left), held by three
 * requests on two listeners, one wrapped app still running, one hot restart behind it.
 */
export function drainingState(): Record<string, unknown> {
  const envoy = {
    epoch: 1,
    pid: 1234,
    instance: "9f3c-1-1",
    generation: 0,
    adminUrl: "http://127.0.0.1:15000",
  };
  return {
    phase: "draining",
    current: envoy,
    serving: envoy,
    epochs: [envoy],
    restarts: 0,
    hotRestarts: 1,
    reloadsRejected: 0,
    drainStartedAt: DRAIN_STARTED_AT,
    inflight: 3,
    filter: "reporting",
    drain: {
      source: "SIGTERM",
      mode: "inflight",
      started_at: new Date(DRAIN_STARTED_AT).toISOString(),
      deadline_at: new Date(DRAIN_STARTED_AT + 30_000).toISOString(),
      deadline_in_ms: 17_700,
      inflight: 3,
      holders: [
        {
          epoch: 1,
          listener: "inbound",
          address: "127.0.0.1:15006",
          method: "GET",
          path: "/slow",
          age_ms: 12_034,
        },
        {
          epoch: 1,
          listener: "outbound",
          address: "127.0.0.1:15001",
          method: "POST",
          path: "/upload",
          age_ms: 8_100,
        },
        {
          epoch: 1,
          listener: "inbound",
          address: "127.0.0.1:15006",
          method: "GET",
          path: "/x",
          age_ms: 400,
        },
      ],
      unnamed: 0,
      by_listener: { inbound: 2, outbound: 1 },
      apps: [{ id: "app", pid: 77 }],
      unsent_bytes: 0,
    },
  };
}

/** What {@linkcode drainingState} reads as, line by line. */
export const DRAINING_LINES = [
  "lastcall: draining (SIGTERM) for 12.3 s, deadline in 17.7 s, mode inflight",
  "envoy: epoch 1 (pid 1234), serving epoch 1; 0 restarts, 1 hot restart",
  "in flight: 3 (inbound 2, outbound 1)",
  "waiting for, oldest first:",
  "   12.0 s  inbound   GET /slow",
  "    8.1 s  outbound  POST /upload",
  "   400 ms  inbound   GET /x",
  "apps still running: app (pid 77)",
];

/** A lastcall running idle: epoch 0 serving, nothing in flight, no drain. */
export function runningState(): Record<string, unknown> {
  const envoy = {
    epoch: 0,
    pid: 4321,
    instance: "9f3c-0-0",
    generation: 0,
    adminUrl: "http://127.0.0.1:15000",
  };
  return {
    phase: "running",
    current: envoy,
    serving: envoy,
    epochs: [envoy],
    restarts: 0,
    hotRestarts: 0,
    reloadsRejected: 0,
    inflight: 0,
    filter: "reporting",
  };
}
