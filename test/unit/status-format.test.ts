// What `lastcall status` prints of `/v1/state`: short aligned lines, ages in human units, long
// paths cut to the width, control characters never sent to the terminal, and never a throw,
// whatever shape a newer or older lastcall (or something else on the port) answers with.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  formatAge,
  formatStatus,
  printable,
  STATUS_WIDTH,
} from "../../agent/commands/status-format.ts";
import {
  DRAIN_STARTED_AT,
  DRAINING_LINES,
  drainingState,
  runningState,
} from "../support/status-states.ts";

/** C0 and C1 control characters: none may reach a terminal. */
// deno-lint-ignore no-control-regex -- matching control characters is the point
const CONTROL_CHARACTERS = /[\u0000-\u001f\u007f-\u009f]/;

/** `drainingState()` with its `drain` changed by `change`. */
function draining(change: (drain: Record<string, unknown>) => void): Record<string, unknown> {
  const state = drainingState();
  change(state.drain as Record<string, unknown>);
  return state;
}

describe("formatStatus", () => {
  it("a drain: what it waits for, oldest first, aligned, and the time left", () => {
    expect(formatStatus(drainingState(), { readiness: { ready: false, reason: "draining" } }))
      .toEqual(DRAINING_LINES);
  });

  it("idle: phase, readiness, epoch and pid, restarts, in flight", () => {
    expect(formatStatus(runningState(), { readiness: { ready: true, reason: "LIVE" } })).toEqual([
      "lastcall: running, ready",
      "envoy: epoch 0 (pid 4321), serving epoch 0; 0 restarts, 0 hot restarts",
      "in flight: 0",
    ]);
  });

  it("not ready says why; a filter that does not report is said; crashes and the last exit are said", () => {
    const state = {
      ...runningState(),
      phase: "starting",
      serving: undefined,
      filter: "never",
      restarts: 2,
      reloadsRejected: 1,
      lastExitReason: "Envoy exited with status 1",
    };
    expect(
      formatStatus(state, {
        readiness: { ready: false, reason: "Envoy epoch 0 starting: admin address not yet known" },
      }),
    ).toEqual([
      "lastcall: starting, not ready: Envoy epoch 0 starting: admin address not yet known",
      "envoy: epoch 0 (pid 4321), none serving yet; 2 restarts, 0 hot restarts, 1 reload rejected",
      "  last exit: Envoy exited with status 1",
      "in flight: 0; filter never",
    ]);
  });

  it("without a readiness answer the phase alone is shown; a hot-restart parent still running is named", () => {
    const parent = { epoch: 0, pid: 1200, instance: "p" };
    const state = {
      ...drainingState(),
      phase: "running",
      drain: undefined,
      epochs: [parent, drainingState().current],
    };
    expect(formatStatus(state).slice(0, 3)).toEqual([
      "lastcall: running",
      "envoy: epoch 1 (pid 1234), serving epoch 1; 0 restarts, 1 hot restart",
      "  also running: epoch 0 (pid 1200)",
    ]);
  });

  it("no Envoy, an unanswering admin, and how the last termination ended", () => {
    const state = {
      phase: "stopped",
      epochs: [],
      restarts: 0,
      hotRestarts: 0,
      inflight: 0,
      filter: "not inserted",
      unresponsiveSince: 1000,
      termination: { mode: "inflight", reason: "deadline", drainMs: 28_004, inflightAtStop: 2 },
    };
    expect(formatStatus(state, { now: 4500 })).toEqual([
      "lastcall: stopped",
      "envoy: not running; 0 restarts, 0 hot restarts",
      "  admin not answering for 3.5 s",
      "in flight: 0; filter not inserted",
      "termination: deadline after 28.0 s, mode inflight, 2 in flight at stop",
    ]);
  });

  it("a drain past its deadline, timed by our clock when the server's cannot tell", () => {
    const state = draining((d) => (d.deadline_in_ms = 0));
    expect(formatStatus({ ...state, phase: "stopping" }, { now: DRAIN_STARTED_AT + 31_000 })[0])
      .toBe("lastcall: stopping (SIGTERM) for 31.0 s, deadline passed, mode inflight");
  });

  it("a drain in place whose wait ended: how and when, no deadline counting down", () => {
    const state = draining((d) => {
      d.source = "POST /drain";
      d.wait_ended = { reason: "inflight_zero", after_ms: 5012 };
    });
    expect(formatStatus(state)[0]).toBe(
      "lastcall: draining (POST /drain) for 12.3 s, wait ended after 5.0 s (inflight_zero), " +
        "mode inflight",
    );
  });

  it("holders of two Envoys get an epoch column; unnamed, unknown ages, connections and unsent bytes are said", () => {
    const state = draining((d) => {
      d.holders = [
        { epoch: 0, listener: "ingress", method: "GET", path: "/a", age_ms: 65_400 },
        { epoch: 1, listener: "127.0.0.1:9000", address: "127.0.0.1:9000" },
      ];
      d.unnamed = 4;
      d.unsent_bytes = 1_048_576;
      d.apps = [];
    });
    expect(formatStatus(state).slice(3)).toEqual([
      "waiting for, oldest first:",
      "   1 m 5 s  epoch 0  ingress         GET /a",
      "         ?  epoch 1  127.0.0.1:9000  (method and path not known)",
      "  + 4 not named",
      "still to send to clients: 1048576 bytes",
    ]);
  });

  it("a holder Envoy gave no method or path for: where it went (protocol, cluster, route)", () => {
    const state = draining((d) => {
      d.holders = [
        {
          epoch: 0,
          listener: "ingress",
          protocol: "HTTP/1.1",
          cluster: "app",
          route: "slow",
          age_ms: 2_500,
        },
        { epoch: 0, listener: "ingress", protocol: "HTTP/2", cluster: "app", age_ms: 1_200 },
      ];
      d.unnamed = 0;
      d.apps = [];
    });
    expect(formatStatus(state).slice(3, 6)).toEqual([
      "waiting for, oldest first:",
      "   2.5 s  ingress  HTTP/1.1 to app (route slow)",
      "   1.2 s  ingress  HTTP/2 to app",
    ]);
  });

  it("nothing named yet: the count not named", () => {
    const state = draining((d) => {
      d.holders = [];
      d.unnamed = 3;
      d.by_listener = { "(unnamed)": 3 };
    });
    expect(formatStatus(state).slice(2)).toEqual([
      "in flight: 3 ((unnamed) 3)",
      "waiting for: 3 not named yet",
      "apps still running: app (pid 77)",
    ]);
  });

  it("a long path is cut to the width, a short one is shown as given", () => {
    const long = `/${"segment/".repeat(40)}end`;
    const state = draining((
      d,
    ) => (d.holders = [{ epoch: 1, listener: "inbound", method: "GET", path: long, age_ms: 1 }, {
      epoch: 1,
      listener: "inbound",
      method: "GET",
      path: "/short",
      age_ms: 0,
    }]));
    const [cutLine, short] = formatStatus(state).slice(4, 6);
    expect(cutLine).toHaveLength(STATUS_WIDTH);
    expect(cutLine).toMatch(/^ {3}1 ms {2}inbound {2}GET \/segment\/segment\/.*…$/);
    expect(short).toBe("   0 ms  inbound  GET /short");
  });

  it("control characters of a path or a listener name never reach the terminal", () => {
    const state = draining((
      d,
    ) => (d.holders = [{
      epoch: 1,
      listener: "in\u001b]0;x\u0007",
      method: "GET",
      path: "/a\u001b[2J\u009bb\nc",
      age_ms: 5,
    }]));
    const line = formatStatus(state)[4];
    expect(line).toBe("   5 ms  in\\x1b]0;x\\x07  GET /a\\x1b[2J\\x9bb\\x0ac");
    expect(printable("/ok/é")).toBe("/ok/é");
    expect(printable("/a\u202eb")).toBe("/a\\u202eb");
  });

  it("an answer that is not an object gives one line", () => {
    expect(formatStatus([1])).toEqual(["lastcall: answered a list, not a state"]);
    expect(formatStatus(null)).toEqual(["lastcall: answered null, not a state"]);
    expect(formatStatus("x")).toEqual(["lastcall: answered string, not a state"]);
  });

  it("any JSON value: no throw, lines of printable text", () => {
    fc.assert(
      fc.property(
        fc.jsonValue(),
        fc.jsonValue(),
        fc.option(fc.integer()),
        (state, readiness, now) => {
          const lines = formatStatus(state, { readiness, now: now ?? undefined });
          expect(lines.length).toBeGreaterThan(0);
          for (const line of lines) {
            expect(typeof line).toBe("string");
            expect(line).not.toMatch(CONTROL_CHARACTERS);
          }
        },
      ),
      { numRuns: 2000 },
    );
  });

  it("any field of a real state replaced by any JSON value: no throw, lines of printable text", () => {
    const valueOr = <T>(real: fc.Arbitrary<T>) =>
      fc.oneof(real, fc.jsonValue(), fc.constant(undefined));
    const holder = fc.record({
      epoch: valueOr(fc.nat(3)),
      listener: valueOr(fc.string()),
      address: valueOr(fc.string()),
      method: valueOr(fc.string()),
      path: valueOr(fc.string({ unit: "binary", maxLength: 300 })),
      age_ms: valueOr(fc.double()),
    }, { requiredKeys: [] });
    const drain = fc.record({
      source: valueOr(fc.string()),
      mode: valueOr(fc.string()),
      started_at: valueOr(fc.date({ noInvalidDate: true }).map((d) => d.toISOString())),
      deadline_at: valueOr(fc.date({ noInvalidDate: true }).map((d) => d.toISOString())),
      deadline_in_ms: valueOr(fc.double()),
      inflight: valueOr(fc.nat()),
      holders: valueOr(fc.array(valueOr(holder), { maxLength: 40 })),
      unnamed: valueOr(fc.nat()),
      by_listener: valueOr(fc.dictionary(fc.string(), valueOr(fc.nat()))),
      apps: valueOr(
        fc.array(valueOr(fc.record({ id: valueOr(fc.string()), pid: valueOr(fc.nat()) }))),
      ),
      unsent_bytes: valueOr(fc.nat()),
    }, { requiredKeys: [] });
    const envoy = valueOr(
      fc.record({ epoch: valueOr(fc.nat()), pid: valueOr(fc.nat()) }, { requiredKeys: [] }),
    );
    const state = fc.record({
      phase: valueOr(fc.constantFrom("starting", "running", "draining", "stopping", "stopped")),
      current: envoy,
      serving: envoy,
      epochs: valueOr(fc.array(envoy)),
      restarts: valueOr(fc.nat()),
      hotRestarts: valueOr(fc.nat()),
      reloadsRejected: valueOr(fc.nat()),
      unresponsiveSince: valueOr(fc.nat()),
      lastExitReason: valueOr(fc.string()),
      inflight: valueOr(fc.nat()),
      filter: valueOr(fc.string()),
      termination: valueOr(
        fc.record({
          mode: valueOr(fc.string()),
          reason: valueOr(fc.string()),
          drainMs: valueOr(fc.nat()),
          inflightAtStop: valueOr(fc.nat()),
        }),
      ),
      drain: valueOr(drain),
    }, { requiredKeys: [] });
    fc.assert(
      fc.property(state, (s) => {
        // Through JSON, as the command gets it: undefined fields are gone, -0 and NaN become JSON's.
        const lines = formatStatus(JSON.parse(JSON.stringify(s)), { now: DRAIN_STARTED_AT });
        expect(lines[0]).toMatch(/^lastcall: /);
        for (const line of lines) expect(line).not.toMatch(CONTROL_CHARACTERS);
      }),
      { numRuns: 1000 },
    );
  });

  it("a holder line fits the width whatever its path", () => {
    fc.assert(
      fc.property(
        fc.string({ unit: "binary", maxLength: 400 }),
        fc.string({ maxLength: 60 }),
        fc.nat({ max: 10 * 3_600_000 }),
        (path, listener, age) => {
          const state = draining((
            d,
          ) => (d.holders = [{ epoch: 1, listener, method: "GET", path, age_ms: age }]));
          expect(formatStatus(state)[4].length).toBeLessThanOrEqual(STATUS_WIDTH);
        },
      ),
    );
  });
});

describe("formatAge", () => {
  it.each([
    [0, "0 ms"],
    [999.4, "999 ms"],
    [999.6, "1.0 s"],
    [12_034, "12.0 s"],
    [59_949, "59.9 s"],
    [59_950, "1 m 0 s"],
    [125_000, "2 m 5 s"],
    [3_599_400, "59 m 59 s"],
    [3_600_000, "1 h 0 m"],
    [90_061_000, "25 h 1 m"],
    [-1, "?"],
    [NaN, "?"],
    [Infinity, "?"],
  ])("%s ms: %s", (ms, text) => {
    expect(formatAge(ms)).toBe(text);
  });
});
