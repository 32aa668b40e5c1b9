// The termination script (agent/drain/termination.ts) on its own: fake epochs and a fake drain,
// so each test reads what the script did to them and the outcome it returned as data.
import { describe, expect, it } from "vitest";
import type { DrainedEpochs } from "../../agent/drain/epochs.ts";
import type { Settled } from "../../agent/drain/wait.ts";
import type { DrainPlan } from "../../agent/drain/plan.ts";
import { terminate } from "../../agent/drain/termination.ts";
import type { EnvoyExit } from "../../agent/envoy/process.ts";
import type { Phase } from "../../agent/state.ts";
import type { Epoch } from "../../agent/supervise/envoys.ts";

/** One epoch whose process ends when the test (or a stop) says so. */
function fakeEpoch(epoch: number, options: { generation?: number; ready?: boolean } = {}) {
  let running = true;
  let end!: (exit: EnvoyExit) => void;
  const exited = new Promise<EnvoyExit>((resolve) => (end = resolve));
  const pid = 100 + epoch;
  const live = {
    info: { epoch, pid, instance: `1-1-${epoch}`, generation: options.generation ?? 1 },
    process: {
      pid,
      exited,
      get running() {
        return running;
      },
      signal: () => {},
      recentOutput: () => [],
    },
    ready: options.ready ?? true,
    reporters: [`1-1-${epoch}`],
    listenersDraining: false,
  } as unknown as Epoch;
  const exit = (how: EnvoyExit = { code: 0, signal: null }) => {
    running = false;
    end(how);
  };
  return { live, exit };
}

/** The epochs as the script sees them; what it asked of them is kept. */
class FakeEpochs implements DrainedEpochs {
  readonly stops: Array<{ epochs: number[]; byAdmin: boolean }> = [];
  readonly drained: number[] = [];
  reportedCount = 0;
  measuredCount = 0;
  constructor(readonly epochs: Array<ReturnType<typeof fakeEpoch>>) {}
  running(): Epoch[] {
    return this.epochs.map((e) => e.live).filter((l) => l.process.running);
  }
  drainListeners(_plan: DrainPlan, which = this.running()): void {
    for (const l of which) {
      if (l.ready && !l.listenersDraining) {
        (l.listenersDraining = true), this.drained.push(l.info.epoch);
      }
    }
  }
  measure(): Promise<number | undefined> {
    return Promise.resolve(this.measuredCount);
  }
  reported(): number {
    return this.reportedCount;
  }
  undelivered() {
    return Promise.resolve({ connections: 0, sending: 0, bytes: 0 });
  }
  async stop(
    which: readonly Epoch[],
    _budgetMs: number,
    options: { byAdmin?: boolean } = {},
  ): Promise<void> {
    if (which.length > 0) {
      this.stops.push({
        epochs: which.map((l) => l.info.epoch),
        byAdmin: options.byAdmin !== false,
      });
    }
    for (const l of which) l.stopAsked = true;
    for (const e of this.epochs.filter((e) => which.includes(e.live))) e.exit();
    await Promise.resolve();
  }
}

/** A drain whose wait ends as the test says; `settled` is what the wait read last. */
function fakeDrain(endWait: () => Promise<string>, settled?: Settled) {
  const now = Date.now();
  const plan: DrainPlan = {
    mode: "inflight",
    scope: "inbound",
    failHealthcheck: false,
    drainDelayMs: 0,
    minDrainMs: 0,
    startedAt: now,
    terminatedAt: now,
    graceEndsAt: now + 30_000,
    deadline: now + 25_000,
  };
  const calls: string[] = [];
  return {
    calls,
    drain: {
      begin: (
        source: string,
        terminating?: boolean,
      ) => (calls.push(`begin ${source} ${terminating}`), plan),
      wait: () => (calls.push("wait"), endWait()),
      get settled() {
        return settled;
      },
    },
  };
}

function logged() {
  const lines: Array<{ event: string; fields: Record<string, unknown> }> = [];
  return {
    lines,
    log: (event: string, fields: Record<string, unknown> = {}) =>
      void lines.push({ event, fields }),
  };
}

describe("terminate", () => {
  it("no Envoy running: the drain begins, nothing is waited for or stopped, exit 0", async () => {
    const { lines, log } = logged();
    const epochs = new FakeEpochs([]);
    const { drain, calls } = fakeDrain(() => Promise.resolve("inflight_zero"));
    const state = { phase: "running" as Phase };
    const outcome = await terminate({ log, state, drain, epochs }, "SIGTERM");
    expect(calls).toEqual(["begin SIGTERM true"]);
    expect(outcome).toMatchObject({
      reason: "envoy_not_running",
      inflightAtStop: 0,
      died: [],
      code: 0,
    });
    expect(lines.map((l) => l.event)).toEqual(["terminate", "terminated"]);
    expect(state.phase).toBe("running"); // the agent applies the outcome
  });

  it("waits, then stops the newest epoch of a generation before its hot-restart parent, and returns what was cut", async () => {
    const { lines, log } = logged();
    const parent = fakeEpoch(0);
    const child = fakeEpoch(1);
    const epochs = new FakeEpochs([parent, child]);
    const { drain, calls } = fakeDrain(() => Promise.resolve("inflight_zero"), {
      at: Date.now(),
      inflight: 0,
      bytesUnsent: 0,
    });
    const state = { phase: "draining" as Phase };
    const outcome = await terminate({ log, state, drain, epochs }, "SIGTERM");
    expect(calls).toEqual(["begin SIGTERM true", "wait"]);
    expect(epochs.drained).toEqual([0, 1]);
    expect(epochs.stops).toEqual([{ epochs: [1], byAdmin: true }, { epochs: [0], byAdmin: true }]);
    expect(state.phase).toBe("stopping");
    expect(outcome).toMatchObject({
      mode: "inflight",
      reason: "inflight_zero",
      inflightAtStop: 0,
      bytesUnsentAtStop: 0,
      died: [],
      code: 0,
    });
    expect(outcome.lastZeroToStopMs).toBeGreaterThanOrEqual(0);
    expect(lines.at(-1)).toMatchObject({
      event: "terminated",
      fields: { reason: "inflight_zero", inflight_at_stop: 0, bytes_unsent_at_stop: 0 },
    });
  });

  it("an epoch killed under the drain: what it had in flight counts as cut, the reason says so, exit 1", async () => {
    const { lines, log } = logged();
    const only = fakeEpoch(0);
    const epochs = new FakeEpochs([only]);
    epochs.reportedCount = 3;
    const { drain } = fakeDrain(async () => {
      only.exit({ code: null, signal: "SIGKILL" });
      await only.live.process.exited;
      epochs.reportedCount = 0;
      return "inflight_zero";
    });
    const outcome = await terminate(
      { log, state: { phase: "draining" }, drain, epochs },
      "SIGTERM",
    );
    expect(outcome).toMatchObject({
      reason: "envoy_exited",
      inflightAtStop: 3,
      died: [{ inflight: 3, exit: "signal SIGKILL" }],
      code: 1,
    });
    expect(outcome.lastZeroToStopMs).toBeUndefined();
    expect(lines.at(-1)?.fields).toMatchObject({
      reason: "envoy_exited",
      inflight_at_stop: 3,
      envoy_exits: ["signal SIGKILL"],
    });
  });

  it("an Envoy that never became ready, and none serving: stopped at once by signal, no wait", async () => {
    const { lines, log } = logged();
    const starting = fakeEpoch(0, { ready: false });
    const epochs = new FakeEpochs([starting]);
    const { drain, calls } = fakeDrain(() => Promise.resolve("inflight_zero"));
    const outcome = await terminate(
      { log, state: { phase: "starting" }, drain, epochs },
      "SIGTERM",
    );
    expect(calls).toEqual(["begin SIGTERM true"]);
    expect(epochs.stops).toEqual([{ epochs: [0], byAdmin: false }]);
    expect(lines.map((l) => l.event)).toEqual(["terminate", "stopping_unready", "terminated"]);
    expect(outcome).toMatchObject({ reason: "envoy_not_ready", died: [], code: 0 });
  });

  it("waits for the reload or crash restart it pre-empted to give up before it looks at the epochs", async () => {
    const { log } = logged();
    const late = fakeEpoch(0);
    const epochs = new FakeEpochs([]);
    const { drain } = fakeDrain(() => Promise.resolve("inflight_zero"), {
      at: Date.now(),
      inflight: 0,
      bytesUnsent: 0,
    });
    // The aborted start had spawned an Envoy before it gave up: the termination drains and stops it too.
    const preempted = Promise.resolve().then(() => void epochs.epochs.push(late));
    const outcome = await terminate(
      { log, state: { phase: "starting" }, drain, epochs },
      "SIGTERM",
      { preempted },
    );
    expect(epochs.stops).toEqual([{ epochs: [0], byAdmin: true }]);
    expect(outcome).toMatchObject({ reason: "inflight_zero", code: 0 });
  });

  it("an app's preStop hook held until Envoy stopped: Envoy stops, the hook is told, and the termination ends only once it is answered (the kubelet gets its answer from a running lastcall)", async () => {
    const { log } = logged();
    const epochs = new FakeEpochs([fakeEpoch(0)]);
    const { drain } = fakeDrain(() => Promise.resolve("inflight_zero"));
    let answer!: () => void;
    let toldAfterStops: unknown[] | undefined;
    const appStop = {
      settled: () => new Promise<void>((resolve) => (answer = resolve)),
      proxyStopped: () => void (toldAfterStops = [...epochs.stops]),
    };
    let done = false;
    const ended = terminate(
      { log, state: { phase: "draining" }, drain, epochs, appStop },
      "SIGTERM",
    ).finally(() => (done = true));
    await new Promise((resolve) => setImmediate(resolve));
    expect(toldAfterStops).toEqual([{ epochs: [0], byAdmin: true }]);
    expect(done).toBe(false);
    answer();
    expect(await ended).toMatchObject({ reason: "inflight_zero", code: 0 });
  });

  it("the operator insists (stopNow): a hook still held does not keep lastcall up", async () => {
    const { log } = logged();
    const epochs = new FakeEpochs([fakeEpoch(0)]);
    const { drain } = fakeDrain(() => Promise.resolve("stopped_now"));
    const stopNow = new AbortController();
    stopNow.abort();
    const appStop = { settled: () => new Promise<void>(() => {}), proxyStopped: () => {} };
    const outcome = await terminate(
      { log, state: { phase: "draining" }, drain, epochs, appStop },
      "SIGTERM",
      { stopNow: stopNow.signal },
    );
    expect(outcome.reason).toBe("stopped_now");
    expect(epochs.stops).toEqual([{ epochs: [0], byAdmin: true }]);
  });
});
