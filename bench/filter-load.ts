// Benchmark: the filter's cost inside the real Envoy, against no filter, a no-op module and its
// variants, saturated and at a fixed rate.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { startReportSink } from "../test/filter/report-sink.ts";
import { benchBootstrap, type FilterVariant, lastcallFilter } from "./lib/bootstrap.ts";
import { progress, QUICK, ROOT, sleep, writeResult } from "./lib/context.ts";
import { type BenchEnvoy, startBenchEnvoy } from "./lib/envoy.ts";
import { h2load, type LoadResult, wrk } from "./lib/load.ts";
import { memory, processCpuSeconds } from "./lib/proc.ts";
import { round, summarize } from "./lib/stats.ts";

const ROUNDS = QUICK ? 1 : 5;
const SECONDS = QUICK ? 1 : 2; // saturated runs (wrk takes whole seconds)
const FIXED_SECONDS = 1; // 4,000 samples per run at the fixed rate
const FIXED_CLIENTS = 8;
const FIXED_RPS_PER_CLIENT = 500; // 4,000 requests per second in all
const CONCURRENCY = [1, 2];

interface Variant {
  id: string;
  label: string;
  filter: FilterVariant;
  /** Run in the saturated loads only (keeps the whole run short; the fixed rate is for `lastcall`'s latency goal). */
  saturatedOnly?: boolean;
}
const before = join(ROOT, "dist/bench/filter-before.wasm");
const noRequestHeaders = join(ROOT, "dist/bench/filter-no-request-headers.wasm");
const VARIANTS: Variant[] = [
  { id: "none", label: "no wasm filter", filter: { kind: "none" } },
  {
    id: "noop",
    label: "no-op module, same exports",
    filter: {
      kind: "wasm",
      wasm: join(ROOT, "dist/bench/noop.wasm"),
      vmId: "noop",
      rootId: "noop",
      configuration: "",
    },
  },
  ...(existsSync(before)
    ? [{
      id: "before",
      // `npm run bench -- --before <commit>` builds it from another commit (build/bench.mjs).
      label: process.env.LASTCALL_BENCH_BEFORE
        ? `lastcall filter at ${process.env.LASTCALL_BENCH_BEFORE}`
        : "lastcall filter at ed4e6f7, before the per-VM count (shared-data counter)",
      filter: lastcallFilter(before),
      saturatedOnly: true,
    }]
    : []),
  { id: "lastcall", label: "lastcall filter", filter: lastcallFilter() },
  ...(existsSync(noRequestHeaders)
    ? [{
      id: "no-rqh",
      label: "lastcall filter without proxy_on_request_headers (measurement only)",
      filter: lastcallFilter(noRequestHeaders),
      saturatedOnly: true,
    }]
    : []),
];

interface Load {
  id: string;
  protocol: "http1" | "http2";
  mode: "saturated" | "fixed";
  what: string;
  run(url: string): LoadResult;
}
const LOADS: Load[] = [
  {
    id: "http1-saturated",
    protocol: "http1",
    mode: "saturated",
    what: "wrk -t1 -c16",
    run: (url) => wrk(url, { connections: 16, seconds: SECONDS }),
  },
  {
    id: "http2-saturated",
    protocol: "http2",
    mode: "saturated",
    what: "h2load -t1 -c4 -m16",
    run: (url) => h2load(url, { clients: 4, streams: 16, seconds: SECONDS }),
  },
  {
    id: "http1-fixed",
    protocol: "http1",
    mode: "fixed",
    what: `h2load --h1 -c${FIXED_CLIENTS} --rps ${FIXED_RPS_PER_CLIENT}`,
    run: (url) =>
      h2load(url, {
        clients: FIXED_CLIENTS,
        seconds: FIXED_SECONDS,
        h1: true,
        rpsPerClient: FIXED_RPS_PER_CLIENT,
      }),
  },
  {
    id: "http2-fixed",
    protocol: "http2",
    mode: "fixed",
    what: `h2load -c${FIXED_CLIENTS} --rps ${FIXED_RPS_PER_CLIENT}`,
    run: (url) =>
      h2load(url, {
        clients: FIXED_CLIENTS,
        seconds: FIXED_SECONDS,
        rpsPerClient: FIXED_RPS_PER_CLIENT,
      }),
  },
];

interface Sample extends LoadResult {
  round: number;
  cpu_us_per_request: number;
}

/** Per-variant summary of one cell, every comparison paired with the reference's run of the same round. */
function summarizeVariant(of: (id: string) => Sample[], id: string) {
  const mine = of(id);
  const paired = (reference: string, f: (a: Sample, b: Sample) => number): number[] => {
    if (reference === id) return [];
    const refs = new Map(of(reference).map((s) => [s.round, s]));
    return mine.map((s) => (refs.has(s.round) ? f(s, refs.get(s.round)!) : Number.NaN));
  };
  const ratio = (reference: string) => summarize(paired(reference, (a, b) => a.rps / b.rps), 3);
  const cpuOver = (reference: string) =>
    summarize(paired(reference, (a, b) => a.cpu_us_per_request - b.cpu_us_per_request), 2);
  return {
    id,
    rps: summarize(mine.map((s) => s.rps), 0),
    p50_us: summarize(mine.map((s) => s.p50_us), 0),
    p99_us: summarize(mine.map((s) => s.p99_us), 0),
    errors: mine.reduce((a, s) => a + s.errors, 0),
    cpu_us_per_request: summarize(mine.map((s) => s.cpu_us_per_request), 2),
    rps_ratio_to_none: ratio("none"),
    rps_ratio_to_noop: ratio("noop"),
    rps_ratio_to_lastcall: ratio("lastcall"),
    added_p50_us: summarize(paired("none", (a, b) => a.p50_us - b.p50_us), 0),
    added_p99_us: summarize(paired("none", (a, b) => a.p99_us - b.p99_us), 0),
    cpu_us_over_none: cpuOver("none"),
    cpu_us_over_noop: cpuOver("noop"),
    cpu_us_over_lastcall: cpuOver("lastcall"),
  };
}

const sink = await startReportSink();
const envoys = new Map<string, BenchEnvoy>();
const began = performance.now();
try {
  for (const concurrency of CONCURRENCY) {
    for (const variant of VARIANTS) {
      envoys.set(
        `${variant.id}/${concurrency}`,
        await startBenchEnvoy(
          () =>
            benchBootstrap({ admin: { port: 0 }, filter: variant.filter, agentPort: sink.port }),
          {
            concurrency,
          },
        ),
      );
    }
  }
  const idleRss = Object.fromEntries(
    [...envoys].map(([key, envoy]) => [key, memory(envoy.child.pid).rss]),
  );
  const samples = new Map<string, Sample[]>();
  for (let r = 0; r < ROUNDS; r++) {
    for (const load of LOADS) {
      for (const concurrency of CONCURRENCY) {
        const variants = VARIANTS.filter((v) => !v.saturatedOnly || load.mode === "saturated");
        for (let k = 0; k < variants.length; k++) {
          const variant = variants[(k + r) % variants.length]!;
          const envoy = envoys.get(`${variant.id}/${concurrency}`)!;
          const cpuBefore = processCpuSeconds(envoy.child.pid);
          const result = load.run(`http://127.0.0.1:${envoy.port}/`);
          const cpu = processCpuSeconds(envoy.child.pid) - cpuBefore;
          const key = `${load.id}/${concurrency}/${variant.id}`;
          samples.set(key, [...samples.get(key) ?? [], {
            ...result,
            round: r,
            cpu_us_per_request: (cpu * 1e6) / Math.max(1, result.requests),
          }]);
          await sleep(200);
        }
      }
      progress("filter-load", `round ${r + 1}/${ROUNDS} ${load.id} done`);
    }
  }
  const loadedRss = Object.fromEntries(
    [...envoys].map(([key, envoy]) => [key, memory(envoy.child.pid).rss]),
  );

  const cells = LOADS.flatMap((load) =>
    CONCURRENCY.map((concurrency) => {
      const of = (id: string) => samples.get(`${load.id}/${concurrency}/${id}`) ?? [];
      return {
        load: load.id,
        protocol: load.protocol,
        mode: load.mode,
        generator: load.what,
        concurrency,
        variants: VARIANTS.filter((v) => of(v.id).length > 0).map((v) =>
          summarizeVariant(of, v.id)
        ),
      };
    })
  );
  writeResult("filter-load", {
    what:
      "Envoy 200 direct responses through no wasm filter, a no-op module, the lastcall filter (now, without proxy_on_request_headers, before the per-VM count)",
    rounds: ROUNDS,
    seconds_per_run: { saturated: SECONDS, fixed: FIXED_SECONDS },
    fixed_rate_rps: FIXED_CLIENTS * FIXED_RPS_PER_CLIENT,
    cpu_source:
      "sum of /proc/<envoy>/task/*/schedstat run time over the load run, ÷ completed requests",
    variants: VARIANTS.map(({ id, label, saturatedOnly }) => ({
      id,
      label,
      saturated_only: saturatedOnly ?? false,
    })),
    envoy_rss_mib: Object.fromEntries(
      Object.keys(idleRss).map((
        key,
      ) => [key, {
        idle: round(idleRss[key]! / 2 ** 20, 1),
        after_load: round(loadedRss[key]! / 2 ** 20, 1),
      }]),
    ),
    cells,
    samples: Object.fromEntries(samples),
    seconds: round((performance.now() - began) / 1000, 1),
  });
  for (const cell of cells) {
    progress(
      "filter-load",
      `${cell.load} c${cell.concurrency}: ${
        cell.variants.map((v) =>
          `${v.id} ${v.rps.median} rps (×${v.rps_ratio_to_none.median}, p50 +${v.added_p50_us.median} µs, cpu ${v.cpu_us_per_request.median} µs)`
        ).join(", ")
      }`,
    );
  }
} finally {
  await Promise.all([...envoys.values()].map((envoy) => envoy.stop()));
  await sink.close();
}
