// Benchmark: what the incumbents poll, and what it costs Envoy as the configuration grows.
import { spawn } from "node:child_process";
import { benchBootstrap } from "./lib/bootstrap.ts";
import { progress, QUICK, sleep, writeResult } from "./lib/context.ts";
import { adminCall, type BenchEnvoy, startBenchEnvoy } from "./lib/envoy.ts";
import { threadCpuSeconds } from "./lib/proc.ts";
import { round, summarize } from "./lib/stats.ts";

const CLUSTERS = [100, 1000, 5000];
const CALLS = QUICK ? 3 : 10;
const BUDGET_MS = QUICK ? 3000 : 6000; // per query and condition: fewer calls when each is slow
const QUERIES = [
  {
    id: "istio",
    label: "Istio exit-on-zero",
    path: "/stats?usedonly&filter=downstream_cx_active$",
    period_s: 1,
  },
  {
    id: "contour",
    label: "Contour",
    path: "/stats/prometheus?filter=^http\\..*\\.downstream_cx_active$",
    period_s: 5,
  },
  {
    id: "lastcall-requests",
    label: "lastcall requests",
    path: "/stats?format=json&usedonly&filter=downstream_rq_active$",
    period_s: 0.2,
  },
  {
    id: "lastcall-inflight",
    label: "lastcall inflight, listeners without the filter (once, at the stop)",
    path:
      "/stats?format=json&usedonly&filter=^wasmcustom\\.lastcall_inflight$|downstream_rq_active$",
    period_s: 0,
  },
];

interface Call {
  ms: number;
  cpu_ms: number;
  bytes: number;
}

/** One call per query in turn until each has CALLS calls or its time budget is spent. */
async function measure(envoy: BenchEnvoy): Promise<Map<string, Call[]>> {
  const calls = new Map<string, Call[]>(QUERIES.map((q) => [q.id, []]));
  const spent = new Map<string, number>(QUERIES.map((q) => [q.id, 0]));
  const pid = envoy.child.pid;
  for (let i = 0; i < CALLS; i++) {
    for (const query of QUERIES) {
      if (i >= 3 && spent.get(query.id)! > BUDGET_MS) continue;
      const cpu = threadCpuSeconds(pid);
      const answer = await adminCall(envoy.admin, query.path, { timeoutMs: 30_000 });
      if (answer.status !== 200) {
        throw new Error(`${query.path} answered ${answer.status}: ${answer.body.slice(0, 200)}`);
      }
      calls.get(query.id)!.push({
        ms: answer.ms,
        cpu_ms: (threadCpuSeconds(pid) - cpu) * 1000,
        bytes: answer.body.length,
      });
      spent.set(query.id, spent.get(query.id)! + answer.ms);
      await sleep(20);
    }
  }
  return calls;
}

const cells: unknown[] = [];
const began = performance.now();
for (const clusters of CLUSTERS) {
  const envoy = await startBenchEnvoy(
    () => benchBootstrap({ admin: { port: 0 }, extraClusters: clusters }),
    { concurrency: 2 },
  );
  try {
    const idle = await measure(envoy);
    // Under load: wrk saturating the listener for as long as the calls take.
    const load = spawn("wrk", ["-t1", "-c16", "-d120s", `http://127.0.0.1:${envoy.port}/`], {
      stdio: "ignore",
    });
    await sleep(500);
    let loaded: Map<string, Call[]>;
    try {
      loaded = await measure(envoy);
    } finally {
      load.kill("SIGINT");
    }
    for (const query of QUERIES) {
      const of = (m: Map<string, Call[]>) => m.get(query.id)!;
      const row = {
        clusters,
        query: query.id,
        label: query.label,
        path: query.path,
        poll_period_s: query.period_s,
        bytes: of(idle)[0]?.bytes ?? 0,
        idle: {
          ms: summarize(of(idle).map((c) => c.ms), 2),
          p_max_ms: round(Math.max(...of(idle).map((c) => c.ms)), 1),
          cpu_ms: summarize(of(idle).map((c) => c.cpu_ms), 2),
        },
        load: {
          ms: summarize(of(loaded).map((c) => c.ms), 2),
          cpu_ms: summarize(of(loaded).map((c) => c.cpu_ms), 2),
        },
      };
      cells.push(row);
      progress(
        "polling",
        `${clusters} clusters ${query.id}: idle ${row.idle.ms.median} ms (cpu ${row.idle.cpu_ms.median} ms), under load ${row.load.ms.median} ms (max ${row.load.ms.max}), ${row.bytes} bytes`,
      );
    }
  } finally {
    await envoy.stop();
  }
}
writeResult("polling", {
  what:
    "Latency and Envoy main-thread CPU per admin call, as the number of clusters grows, idle and under a saturating wrk load",
  calls_per_query: CALLS,
  cells,
  seconds: round((performance.now() - began) / 1000, 1),
});
