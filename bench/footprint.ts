// Benchmark: what the agent costs to run (memory at start, idle and under load; CPU), against
// Istio's and Contour's agents.
import { spawnSync } from "node:child_process";
import { mkdtempSync, realpathSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { resolveDeno } from "../build/deno.mjs";
import { freePort } from "../test/support/lastcall.ts";
import { benchBootstrap } from "./lib/bootstrap.ts";
import {
  ANCHORS,
  type Child,
  envoyBinary,
  get,
  progress,
  QUICK,
  ROOT,
  sleep,
  start,
  until,
  writeResult,
} from "./lib/context.ts";
import { listenerPort, untilReady } from "./lib/envoy.ts";
import { h2load } from "./lib/load.ts";
import { children, cpuSeconds, executable, memory, signalIfSame, startTime } from "./lib/proc.ts";
import { round, summarize } from "./lib/stats.ts";

const ROUNDS = QUICK ? 1 : 3;
const IDLE_MS = QUICK ? 3000 : 4000;
const LOAD_S = QUICK ? 3 : 4;
// The pinned Deno the tests use (installed on demand into .cache/deno by build/deno.mjs).
const DENO = resolveDeno();
const MIB = 2 ** 20;

/** Drops a file's pages from the page cache (GNU dd, as coreutils documents). */
function dropCache(file: string): void {
  spawnSync("dd", [
    "if=/dev/null",
    `of=${realpathSync(file)}`,
    "oflag=nocache",
    "conv=notrunc,fdatasync",
    "count=0",
  ], { stdio: "ignore" });
}

interface Started {
  agent: Child;
  port?: number;
  envoyPid?: number;
  dir: string;
}
interface Subject {
  id: string;
  label: string;
  binary: string;
  start(): Promise<Started>;
}

function lastcallSubject(id: string, label: string, command: string[], binary: string): Subject {
  return {
    id,
    label,
    binary,
    async start() {
      const dir = mkdtempSync(join(tmpdir(), "lcperf-fp-"));
      writeFileSync(join(dir, "envoy.json"), JSON.stringify(benchBootstrap({})));
      let ready: { pid: number; admin: string } | undefined;
      const agent = start(command[0]!, [
        ...command.slice(1),
        "run",
        "--config",
        join(dir, "envoy.json"),
        "--admin-port",
        "0",
        "--status-port",
        "0",
        "--",
        "-l",
        "warning",
      ], {
        onLine: (line) => {
          if (line.includes('"event":"ready"')) {
            ready = JSON.parse(line) as { pid: number; admin: string };
          }
        },
      });
      const { pid, admin } = await until(() => ready, `${id} ready`, 30_000);
      return { agent, port: await listenerPort({ url: admin }), envoyPid: pid, dir };
    },
  };
}

const SUBJECTS: Subject[] = [
  lastcallSubject("lastcall", "lastcall (dist/lastcall, single executable)", [
    join(ROOT, "dist/lastcall"),
  ], join(ROOT, "dist/lastcall")),
  lastcallSubject("lastcall-deno", "lastcall under Deno (agent/main.ts)", [
    DENO,
    "run",
    "--allow-all",
    "--quiet",
    join(ROOT, "agent/main.ts"),
  ], DENO),
  {
    id: "istio",
    label: "Istio pkg/envoy agent (bench/anchors/istio-agent)",
    binary: join(ANCHORS, "istio-agent"),
    async start() {
      const dir = mkdtempSync(join(tmpdir(), "lcperf-fp-"));
      const adminPort = await freePort();
      writeFileSync(
        join(dir, "envoy.json"),
        JSON.stringify(benchBootstrap({ admin: { port: adminPort } })),
      );
      const agent = start(join(ANCHORS, "istio-agent"), [
        "--envoy",
        envoyBinary(),
        "--config",
        join(dir, "envoy.json"),
        "--admin-port",
        String(adminPort),
      ]);
      const admin = { url: `http://127.0.0.1:${adminPort}` };
      await untilReady(admin, "Istio's Envoy");
      const binary = realpathSync(envoyBinary());
      const envoyPid = await until(
        () => children(agent.pid).find((c) => executable(c) === binary),
        "Istio's Envoy",
      );
      return { agent, port: await listenerPort(admin), envoyPid, dir };
    },
  },
  {
    id: "contour",
    label: "Contour shutdown-manager (contour envoy shutdown-manager)",
    binary: join(ANCHORS, "contour"),
    async start() {
      const dir = mkdtempSync(join(tmpdir(), "lcperf-fp-"));
      const port = await freePort();
      const agent = start(join(ANCHORS, "contour"), [
        "envoy",
        "shutdown-manager",
        "--serve-port",
        String(port),
        "--ready-file",
        join(dir, "ok"),
      ]);
      await until(
        async () => ((await get(`http://127.0.0.1:${port}/healthz`)).status === 200
          ? true
          : undefined),
        "shutdown-manager",
      );
      return { agent, dir };
    },
  },
];

interface Sample {
  peak_mib: number;
  rss_mib: number;
  anon_mib: number;
  file_mib: number;
  load_rss_mib?: number;
  load_cpu_pct?: number;
  envoy_cpu_pct?: number;
  load_rps?: number;
}

async function measure(subject: Subject): Promise<Sample> {
  dropCache(subject.binary);
  const started = await subject.start();
  const envoyStarted = started.envoyPid === undefined ? Number.NaN : startTime(started.envoyPid);
  try {
    await sleep(3000);
    const peak = memory(started.agent.pid).peak;
    await sleep(IDLE_MS - 3000 > 0 ? IDLE_MS - 3000 : 0);
    const idle = memory(started.agent.pid);
    const sample: Sample = {
      peak_mib: round(peak / MIB, 1),
      rss_mib: round(idle.rss / MIB, 1),
      anon_mib: round(idle.anon / MIB, 1),
      file_mib: round(idle.file / MIB, 1),
    };
    if (started.port !== undefined) {
      const agentCpu = cpuSeconds(started.agent.pid);
      const envoyCpu = cpuSeconds(started.envoyPid!);
      const load = h2load(`http://127.0.0.1:${started.port}/`, {
        clients: 4,
        seconds: LOAD_S,
        h1: true,
        rpsPerClient: 250,
      });
      sample.load_cpu_pct = round(((cpuSeconds(started.agent.pid) - agentCpu) / LOAD_S) * 100, 2);
      sample.envoy_cpu_pct = round(((cpuSeconds(started.envoyPid!) - envoyCpu) / LOAD_S) * 100, 1);
      sample.load_rss_mib = round(memory(started.agent.pid).rss / MIB, 1);
      sample.load_rps = round(load.rps, 0);
    }
    return sample;
  } finally {
    started.agent.kill("SIGTERM");
    const timer = setTimeout(() => started.agent.kill("SIGKILL"), 10_000);
    await started.agent.exited;
    clearTimeout(timer);
    if (started.envoyPid !== undefined) signalIfSame(started.envoyPid, envoyStarted, "SIGKILL");
    rmSync(started.dir, { recursive: true, force: true });
  }
}

const samples = new Map<string, Sample[]>(SUBJECTS.map((s) => [s.id, []]));
const began = performance.now();
for (let r = 0; r < ROUNDS; r++) {
  for (let k = 0; k < SUBJECTS.length; k++) {
    const subject = SUBJECTS[(k + r) % SUBJECTS.length]!;
    const sample = await measure(subject);
    samples.get(subject.id)!.push(sample);
    progress(
      "footprint",
      `round ${
        r + 1
      }/${ROUNDS} ${subject.id}: peak ${sample.peak_mib} MiB, steady ${sample.rss_mib} MiB (anon ${sample.anon_mib}, file ${sample.file_mib})${
        sample.load_cpu_pct !== undefined
          ? `, at ${sample.load_rps} rps ${sample.load_rss_mib} MiB, agent CPU ${sample.load_cpu_pct} %`
          : ""
      }`,
    );
  }
}
const size = (file: string) => round(statSync(file).size / MIB, 1);
writeResult("footprint", {
  what:
    "Agent memory (MiB) at start-up peak, steady idle, under 1,000 rps through Envoy; agent CPU under that load; binary sizes",
  rounds: ROUNDS,
  sizes_mib: {
    lastcall: size(join(ROOT, "dist/lastcall")),
    bundle: size(join(ROOT, "dist/lastcall.cjs")),
    deno: size(DENO),
    node: size(process.execPath),
    istio_agent: size(join(ANCHORS, "istio-agent")),
    contour: size(join(ANCHORS, "contour")),
  },
  subjects: SUBJECTS.map((s) => {
    const mine = samples.get(s.id)!;
    const pick = (f: (x: Sample) => number | undefined) =>
      summarize(mine.map(f).filter((v): v is number => v !== undefined), 1);
    return {
      id: s.id,
      label: s.label,
      peak_mib: pick((x) => x.peak_mib),
      rss_mib: pick((x) => x.rss_mib),
      anon_mib: pick((x) => x.anon_mib),
      file_mib: pick((x) => x.file_mib),
      load_rss_mib: pick((x) => x.load_rss_mib),
      load_cpu_pct: pick((x) => x.load_cpu_pct),
      envoy_cpu_pct: pick((x) => x.envoy_cpu_pct),
    };
  }),
  samples: Object.fromEntries(samples),
  seconds: round((performance.now() - began) / 1000, 1),
});
