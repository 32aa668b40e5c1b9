// Benchmark, the headline: each contender told to stop as Kubernetes would, with the same Envoy,
// upstream and client workload.
import { startUpstreamApp } from "../test/support/upstream-app.ts";
import { CONTENDERS, type Parity, type Running } from "./lib/contenders.ts";
import { progress, QUICK, sleep, writeResult } from "./lib/context.ts";
import { exitedSince, startTime } from "./lib/proc.ts";
import { round, summarize } from "./lib/stats.ts";
import { Workload } from "./lib/workload.ts";

const ROUNDS = QUICK ? 1 : 5;
// LASTCALL_BENCH_CONTENDERS=id,id runs a subset (while working on the harness).
const PICKED = process.env.LASTCALL_BENCH_CONTENDERS?.split(",");
const ACTIVE = CONTENDERS.map((_, i) => i).filter((i) =>
  !PICKED || PICKED.includes(CONTENDERS[i]!.id)
);
const PARITY: Omit<Parity, "clusters"> = { graceMs: 10_000, lagMs: 2000, concurrency: 2 };
const SMALL_CLUSTERS = 100;
const LARGE_CLUSTERS = 5000;
/** Who runs on the large configuration: its goal is lastcall's (the incumbents would add ~3 min). */
const LARGE_CONTENDERS = ["lastcall-inflight", "lastcall-requests"];
const WARM_UP_MS = 1000;
const STREAM_CHUNKS = 30; // 3 s of chunks, started 0.5 s before the signal
// A phone on a poor link: 12 MB at 3 MB/s, about 1 s in at the signal; its last bytes reach it
// seconds after Envoy has finished the stream (they wait in Envoy's and the kernel's buffers).
const SLOW_READER_BYTES = 12_000_000;
const SLOW_READER_RATE = 3_000_000;
const BUSY =
  "mixed keep-alive HTTP/1.1 (10 ms–3 s), HTTP/2, a streaming response, a WebSocket, a slow reader (12 MB at 3 MB/s), late arrivals";
const WORKLOADS: {
  id: string;
  idle: number;
  clusters: number;
  contenders?: string[];
  what: string;
}[] = [
  { id: "busy", idle: 0, clusters: SMALL_CLUSTERS, what: BUSY },
  {
    id: "idle",
    idle: 6,
    clusters: SMALL_CLUSTERS,
    what: "the same plus 6 idle keep-alive connections",
  },
  {
    id: `busy-${LARGE_CLUSTERS}`,
    idle: 0,
    clusters: LARGE_CLUSTERS,
    contenders: LARGE_CONTENDERS,
    what: `workload \`busy\` on a configuration of ${
      LARGE_CLUSTERS.toLocaleString("en-US")
    } clusters`,
  },
];

interface Run {
  workload: string;
  clusters: number;
  contender: string;
  round: number;
  ok: number;
  failed: number;
  failed_by_kind: Record<string, number>;
  ok_after_signal: number;
  tail_ms: number;
  total_ms: number;
  last_good_ms: number;
  killed_at_grace: boolean;
  leftover_run_dir?: string;
  agent_exit?: string;
  lastcall_events?: Record<string, unknown>[];
  /** lastcall only: last good response (client) → these moments; negative when the client read its last byte after. */
  lastcall_share?: {
    /** → `drain_wait_done` (the drain decided). */
    decided_ms: number;
    /** → Envoy received `POST /quitquitquit` (its admin access log): lastcall's own share of the tail. */
    told_ms: number;
    /** → `envoy_quit_requested` (Envoy answered the quit). */
    quit_requested_ms: number;
    after_floor: boolean;
  };
  failures: string[];
}

/** ms from the client's last good response to lastcall's first event `name` (both Date.now() clocks); NaN when absent. */
function sinceLastGood(
  events: Record<string, unknown>[],
  name: string,
  lastGoodWallMs: number,
): number {
  const event = events.find((e) => e.event === name);
  return event ? round2(Date.parse(String(event.ts)) - lastGoodWallMs) : Number.NaN;
}

async function oneRun(
  contenderIndex: number,
  workload: (typeof WORKLOADS)[number],
  round: number,
  upstreamPort: number,
): Promise<Run> {
  const contender = CONTENDERS[contenderIndex]!;
  const running: Running = await contender.start(upstreamPort, {
    ...PARITY,
    clusters: workload.clusters,
  });
  const envoyStarted = startTime(running.envoyPid);
  const clients = new Workload({
    port: running.port,
    lagMs: PARITY.lagMs,
    idle: workload.idle,
    seed: 1000 * round + contenderIndex,
  });
  let gone = 0;
  let killed = false;
  try {
    await clients.start();
    await sleep(WARM_UP_MS - 500);
    clients.stream(STREAM_CHUNKS);
    await clients.slowReader(SLOW_READER_BYTES, SLOW_READER_RATE);
    await sleep(500);
    const signalAt = performance.now();
    clients.signal();
    running.terminate();
    const graceEnd = signalAt + PARITY.graceMs;
    // Envoy gone: polled every 2 ms (the /proc entry gone or a zombie), SIGKILL at the grace.
    while (!exitedSince(running.envoyPid, envoyStarted)) {
      if (performance.now() >= graceEnd) {
        killed = true;
        running.kill();
      }
      await sleep(2);
    }
    gone = performance.now();
    await clients.settled();
    // The agent's own exit (it cleans up after Envoy): waited for, not cut short, unless hung.
    const exitedInTime = await Promise.race([
      running.exited.then(() => true),
      sleep(Math.max(5000, graceEnd - performance.now())).then(() => false),
    ]);
    if (!exitedInTime) running.kill();
    await running.exited;
    const outcome = clients.outcome;
    const failed = Object.values(outcome.failed).reduce((a, b) => a + b, 0);
    const events = running.drainEvents?.();
    return {
      workload: workload.id,
      clusters: workload.clusters,
      contender: contender.id,
      round,
      ok: outcome.ok,
      failed,
      failed_by_kind: outcome.failed,
      ok_after_signal: outcome.okAfterSignal,
      tail_ms: round2(gone - outcome.lastGoodAt),
      total_ms: round2(gone - signalAt),
      last_good_ms: round2(outcome.lastGoodAt - signalAt),
      killed_at_grace: killed,
      // Checked only after a clean exit (code 0): a killed agent cannot clean up.
      leftover_run_dir: running.agentExit?.() === "code 0" ? running.leftover?.() : undefined,
      agent_exit: running.agentExit?.(),
      lastcall_events: events,
      lastcall_share: events && {
        decided_ms: sinceLastGood(events, "drain_wait_done", outcome.lastGoodWallMs),
        told_ms: round2((running.quitReceivedAt?.() ?? Number.NaN) - outcome.lastGoodWallMs),
        quit_requested_ms: sinceLastGood(events, "envoy_quit_requested", outcome.lastGoodWallMs),
        // The minimum drain runs from the drain's start (just before `listeners_draining`).
        after_floor:
          !(sinceLastGood(events, "listeners_draining", outcome.lastGoodWallMs) > -PARITY.lagMs),
      },
      failures: clients.failures,
    };
  } finally {
    clients.close();
    running.kill();
  }
}

/** Whether the last good response came after lastcall's minimum drain (= the endpoint lag) ended. */
function afterFloor(run: Run): boolean {
  return run.lastcall_share?.after_floor ?? run.last_good_ms >= PARITY.lagMs;
}

function round2(value: number): number {
  return round(value, 1);
}

const app = await startUpstreamApp();
const runs: Run[] = [];
const errors: { workload: string; contender: string; round: number; error: string }[] = [];
const began = performance.now();
for (const workload of WORKLOADS) {
  for (let r = 0; r < ROUNDS; r++) {
    // Contenders alternate within a round; the order rotates from round to round.
    const active = ACTIVE.filter((i) =>
      !workload.contenders || workload.contenders.includes(CONTENDERS[i]!.id)
    );
    for (let k = 0; k < active.length; k++) {
      const index = active[(k + r) % active.length]!;
      let run: Run;
      try {
        run = await oneRun(index, workload, r, app.port);
      } catch (error) {
        // One broken run (a contender that did not start) is recorded and the rest goes on.
        errors.push({
          workload: workload.id,
          contender: CONTENDERS[index]!.id,
          round: r,
          error: String(error).slice(0, 2000),
        });
        progress(
          "termination",
          `${workload.id} round ${r + 1}/${ROUNDS} ${CONTENDERS[index]!.id}: ERROR ${
            String(error).split("\n")[0]
          }`,
        );
        continue;
      }
      runs.push(run);
      save(false);
      const share = run.lastcall_share
        ? `, lastcall's share ${run.lastcall_share.told_ms} ms (decided ${run.lastcall_share.decided_ms} ms, quit answered ${run.lastcall_share.quit_requested_ms} ms)`
        : "";
      progress(
        "termination",
        `${workload.id} round ${
          r + 1
        }/${ROUNDS} ${run.contender}: failed ${run.failed}, tail ${run.tail_ms} ms, total ${run.total_ms} ms${share}${
          run.killed_at_grace ? " (killed at grace)" : ""
        }${run.leftover_run_dir ? ` LEFTOVER ${run.leftover_run_dir}` : ""}`,
      );
      if (run.failed > 0) progress("termination", `  ${run.failures.slice(0, 3).join("; ")}`);
    }
  }
}
await app.close();

function save(complete: boolean): void {
  const summary = WORKLOADS.map((workload) => ({
    workload: workload.id,
    what: workload.what,
    clusters: workload.clusters,
    contenders: CONTENDERS.filter((c) => runs.some((run) => run.contender === c.id)).map((c) => {
      const mine = runs.filter((run) => run.workload === workload.id && run.contender === c.id);
      return {
        id: c.id,
        label: c.label,
        settings: c.settings,
        failed: summarize(mine.map((run) => run.failed), 0),
        failed_total: mine.reduce((a, run) => a + run.failed, 0),
        tail_ms: summarize(mine.map((run) => run.tail_ms), 1),
        total_ms: summarize(mine.map((run) => run.total_ms), 1),
        killed_at_grace: mine.filter((run) => run.killed_at_grace).length,
        runs: mine.length,
        ...(c.id.startsWith("lastcall")
          ? {
            // Its own share of the tail, from runs whose last good response came after the minimum
            // drain (before it, the share would be the floor's wait, not lastcall's).
            lastcall_share_ms: summarize(
              mine.filter(afterFloor).map((run) => run.lastcall_share?.told_ms ?? Number.NaN),
              1,
            ),
            lastcall_decided_ms: summarize(
              mine.filter(afterFloor).map((run) => run.lastcall_share?.decided_ms ?? Number.NaN),
              1,
            ),
            lastcall_quit_answered_ms: summarize(
              mine.filter(afterFloor).map((run) =>
                run.lastcall_share?.quit_requested_ms ?? Number.NaN
              ),
              1,
            ),
            // The rest of the tail: Envoy told to quit → its process gone (Envoy's own shutdown).
            envoy_exit_ms: summarize(
              mine.map((run) => run.tail_ms - (run.lastcall_share?.told_ms ?? Number.NaN)),
              1,
            ),
            runs_ended_in_floor: mine.filter((run) => !afterFloor(run)).length,
          }
          : {}),
      };
    }).filter((c) => c.runs > 0),
  })).filter((w) => w.contenders.length > 0);
  writeResult("termination", {
    what:
      "Termination under one client workload: failed requests, tail (last good response → Envoy gone) and total (signal → Envoy gone), per contender",
    // Written after every run: a run cut short leaves what it measured, marked incomplete.
    complete,
    parity: {
      grace_ms: PARITY.graceMs,
      endpoint_lag_ms: PARITY.lagMs,
      concurrency: PARITY.concurrency,
    },
    clusters: { small: SMALL_CLUSTERS, large: LARGE_CLUSTERS, large_contenders: LARGE_CONTENDERS },
    lastcall_share:
      "client's last good response (Date.now()) → Envoy received POST /quitquitquit (its admin access log START_TIME); decided: → lastcall's drain_wait_done ts; quit answered: → lastcall's envoy_quit_requested ts (logged after Envoy answered)",
    rounds: ROUNDS,
    seconds: round2((performance.now() - began) / 1000),
    lastcall_run_dirs_left: runs.filter((run) => run.leftover_run_dir).map((run) =>
      run.leftover_run_dir
    ),
    lastcall_clean_exits: runs.filter((run) =>
      run.contender.startsWith("lastcall") && run.agent_exit === "code 0"
    ).length,
    errors,
    summary,
    runs,
  });
}

save(true);
progress("termination", `done in ${Math.round((performance.now() - began) / 1000)} s`);
