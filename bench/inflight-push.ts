// Benchmark: what the filter's push buys (last response → drain over → Envoy gone) and costs
// (report calls per request).
import { execFileSync } from "node:child_process";
import { Agent as HttpAgent, request } from "node:http";
import { waitFor } from "../test/support/envoy.ts";
import {
  inboundConfig,
  type LastcallEvent,
  startLastcall,
  type TestLastcall,
} from "../test/support/lastcall.ts";
import { removeTempDirs } from "../test/support/temp.ts";
import { startUpstreamApp, type UpstreamApp } from "../test/support/upstream-app.ts";
import { progress, QUICK, sleep, writeResult } from "./lib/context.ts";
import { summarize } from "./lib/stats.ts";
import { exitedSince, startTime } from "./lib/proc.ts";

// startLastcall writes each run's config into a temporary folder: removed when the benchmark ends.
process.on("exit", removeTempDirs);

const TRIALS = QUICK ? 2 : 10;
const HELD_PER_TRIAL = 3;
const STEADY_REQUESTS = 5000;
const CONCURRENCY = 2;
const HEARTBEAT_MS = 1000;

const ARGS = [
  "--concurrency",
  String(CONCURRENCY),
  "--heartbeat",
  `${HEARTBEAT_MS}ms`,
  "--min-drain",
  "0s",
  "--grace",
  "30s",
  "--no-hot-restart",
];

async function state(lc: TestLastcall): Promise<{ inflight: number; filter: string }> {
  return await (await fetch(`${await lc.statusUrl()}/v1/state`)).json() as {
    inflight: number;
    filter: string;
  };
}

async function reporting(app: UpstreamApp): Promise<{ lc: TestLastcall; port: number }> {
  const lc = startLastcall(inboundConfig({ upstreamPort: app.port }), { args: ARGS });
  await lc.event("ready");
  await waitFor(async () => ((await state(lc)).filter === "reporting" ? true : undefined), {
    what: "the filter's first report",
  });
  return { lc, port: await lc.listenerPort("ingress") };
}

/** GET on its own connection; resolves with the client time the last body byte arrived. */
function completedAt(port: number, path: string): Promise<number> {
  return new Promise((done, fail) => {
    const req = request({ host: "127.0.0.1", port, path, agent: false }, (res) => {
      res.resume();
      res.on("end", () => done(Date.now()));
    });
    req.on("error", fail);
    req.end();
  });
}

/** One drain: requests held across SIGTERM, released at once; ms from the last response to the decision and to Envoy gone. */
async function pushDelayTrial(
  app: UpstreamApp,
): Promise<{ decided_ms: number; quit_ms: number; gone_ms: number }> {
  const { lc, port } = await reporting(app);
  try {
    const envoyPid = Number((await lc.event("ready")).pid);
    const envoyStarted = startTime(envoyPid);
    const responses = Array.from({ length: HELD_PER_TRIAL }, () => completedAt(port, "/hold"));
    await app.until((a) => a.held === HELD_PER_TRIAL);
    await waitFor(async () => ((await state(lc)).inflight === HELD_PER_TRIAL ? true : undefined), {
      what: "the agent to see the held requests",
    });
    lc.signal("SIGTERM");
    await lc.event("listeners_draining");
    app.release();
    const lastResponse = Math.max(...await Promise.all(responses));
    while (!exitedSince(envoyPid, envoyStarted)) await sleep(2);
    const gone = Date.now();
    const done: LastcallEvent = await lc.event("drain_wait_done");
    if (done.reason !== "inflight_zero") {
      throw new Error(`Drain ended with ${String(done.reason)}, not inflight_zero`);
    }
    const quit: LastcallEvent = await lc.event("envoy_quit_requested");
    await lc.exited;
    return {
      decided_ms: Date.parse(done.ts) - lastResponse,
      quit_ms: Date.parse(quit.ts) - lastResponse,
      gone_ms: gone - lastResponse,
    };
  } finally {
    await lc.stop("SIGKILL");
  }
}

async function promValue(lc: TestLastcall, name: string): Promise<number> {
  const text = await (await fetch(`${await lc.statusUrl()}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(`${name} `));
  if (!line) throw new Error(`No ${name} in /metrics`);
  return Number(line.split(" ")[1]);
}

async function envoyStats(lc: TestLastcall): Promise<Record<string, number>> {
  const body = await (await fetch(
    `${lc.adminUrl()}/stats?format=json&filter=${
      encodeURIComponent(
        "lastcall_agent.upstream_rq_total$|lastcall_reports_sent$|lastcall_inflight$|ingress.downstream_rq_total$",
      )
    }`,
  )).json() as {
    stats: Array<{ name: string; value?: number }>;
  };
  return Object.fromEntries(
    body.stats.filter((s) => typeof s.value === "number").map((s) => [s.name, s.value!]),
  );
}

/** Sequential requests on one keep-alive connection; report calls counted around them. */
async function steadyState(app: UpstreamApp) {
  const { lc, port } = await reporting(app);
  try {
    const agent = new HttpAgent({ keepAlive: true, maxSockets: 1 });
    const get = () =>
      new Promise<void>((done, fail) => {
        const req = request({ host: "127.0.0.1", port, path: "/", agent }, (res) => {
          res.resume();
          res.on("end", () => done());
        });
        req.on("error", fail);
        req.end();
      });
    const before = {
      accepted: await promValue(lc, "lastcall_filter_reports_total"),
      envoy: await envoyStats(lc),
    };
    const started = performance.now();
    for (let i = 0; i < STEADY_REQUESTS; i++) await get();
    const elapsedMs = performance.now() - started;
    const after = {
      accepted: await promValue(lc, "lastcall_filter_reports_total"),
      envoy: await envoyStats(lc),
    };
    agent.destroy();
    const delta = (name: string) => (after.envoy[name] ?? 0) - (before.envoy[name] ?? 0);
    const accepted = after.accepted - before.accepted;
    const sent = delta("wasmcustom.lastcall_reports_sent");
    const upstream = delta("cluster.lastcall_agent.upstream_rq_total");
    const served = delta("http.ingress.downstream_rq_total");
    const count = await state(lc);
    return {
      requests: STEADY_REQUESTS,
      served_by_envoy: served,
      elapsed_ms: Math.round(elapsedMs),
      report_calls: {
        accepted_by_agent: accepted,
        sent_by_filter: sent,
        envoy_agent_cluster_rq: upstream,
      },
      calls_per_request: round(upstream / STEADY_REQUESTS, 4),
      heartbeat_calls_per_second: round(upstream / (elapsedMs / 1000), 2),
      count_after: {
        filter_gauge: after.envoy["wasmcustom.lastcall_inflight"] ?? 0,
        agent: count.inflight,
      },
    };
  } finally {
    await lc.stop("SIGTERM");
  }
}

function round(value: number, digits = 1): number {
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}

const app = await startUpstreamApp();
const trials: { decided_ms: number; quit_ms: number; gone_ms: number }[] = [];
for (let i = 0; i < TRIALS; i++) trials.push(await pushDelayTrial(app));
const steady = await steadyState(app);
await app.close();

const envoyBin = process.env.ENVOY_BIN ?? "envoy";
const results = {
  what:
    "Real Envoy under lastcall: push delay while draining, and report calls per request in steady state",
  environment: {
    envoy: /\/(\d+\.\d+\.\d+)\//.exec(execFileSync(envoyBin, ["--version"], { encoding: "utf8" }))
      ?.[1] ?? "unknown",
    node: process.version,
    concurrency: CONCURRENCY,
    heartbeat_ms: HEARTBEAT_MS,
    cpus: (await import("node:os")).cpus().length,
  },
  push_delay: {
    what:
      "ms from the client receiving the last response's last byte to lastcall's drain_wait_done (inflight_zero: the pushed zero, confirmed by a probe), to its envoy_quit_requested (after the final count read) and to Envoy's process gone",
    trials: TRIALS,
    held_requests_per_trial: HELD_PER_TRIAL,
    decided_ms: summarize(trials.map((t) => t.decided_ms), 0),
    quit_requested_ms: summarize(trials.map((t) => t.quit_ms), 0),
    gone_ms: summarize(trials.map((t) => t.gone_ms), 0),
    samples: trials,
  },
  steady_state: steady,
};
writeResult("inflight-push", results);
progress(
  "inflight-push",
  `last response → decision ${results.push_delay.decided_ms.median} ms, → quit requested ${results.push_delay.quit_requested_ms.median} ms, → Envoy gone ${results.push_delay.gone_ms.median} ms (medians); ${steady.calls_per_request} report calls per request`,
);
