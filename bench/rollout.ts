// Benchmark: a rollout on a real kubelet, each contender in the pod shape its project generates.
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { buildImages } from "../build/image.mjs";
import { type KubeCluster, kubeClusterSkipReason, startKubeCluster } from "../test/support/kube.ts";
import { importPodmanImages } from "../test/support/kube-workload.ts";
import { ANCHORS, progress, QUICK, writeResult } from "./lib/context.ts";
import { ROLLOUT_CONTENDERS } from "./lib/rollout-pods.ts";
import { anchorsImage, RELIST_PERIOD_MS, rolloutOnce, type RolloutRun } from "./lib/rollout-run.ts";
import { round, summarize } from "./lib/stats.ts";

const ROUNDS = Number(process.env.LASTCALL_BENCH_ROLLOUT_ROUNDS ?? (QUICK ? 1 : 3));
const REPLICAS = 3;
const GRACE_S = 30;
const LOAD = {
  keepAlivePerSecond: 20,
  newConnectionPerSecond: 10,
  longEveryMs: 500,
  longMs: 3000,
  slowEveryMs: 2000,
  slowMb: 4,
  slowBytesPerSecond: 1_000_000,
};
const WARM_UP_ANSWERS = 60;
// The app as Istio's injected pods and the gateway pairs' pods have it (no preStop), and as
// lastcall's docs and `lastcall check` ask for it (examples/k8s/deployment.yaml: preStop sleep 5 s,
// covering endpoint removal). LASTCALL_BENCH_ROLLOUT_WORKLOADS=id,id runs a subset.
const WORKLOADS = [
  {
    id: "app-no-prestop",
    appPreStopS: 0,
    what: "the app has no preStop hook (as in Istio's injected pods and the gateway pairs')",
  },
  {
    id: "app-prestop-5s",
    appPreStopS: 5,
    what:
      "the app has preStop `sleep: {seconds: 5}` (examples/k8s/deployment.yaml; what `lastcall check` asks for)",
  },
].filter((w) =>
  !process.env.LASTCALL_BENCH_ROLLOUT_WORKLOADS ||
  process.env.LASTCALL_BENCH_ROLLOUT_WORKLOADS.split(",").includes(w.id)
);
// LASTCALL_BENCH_CONTENDERS=id,id runs a subset (while working on the harness).
const PICKED = process.env.LASTCALL_BENCH_CONTENDERS?.split(",");
// LASTCALL_BENCH_ROLLOUT_LOGS=dir keeps the cluster's component logs there (the kubelet's at
// --v=2: its relists, probes and hooks, for a pod's timeline).
const KEEP_LOGS = process.env.LASTCALL_BENCH_ROLLOUT_LOGS;
const log = (line: string) => progress("rollout", line);

const skip = kubeClusterSkipReason();
if (skip) {
  console.error(`bench rollout: cannot run here: real kubelet ${skip}`);
  process.exit(3);
}

// Everything temporary (the cluster's folder, image contexts) in one folder, removed at the end.
const temp = mkdtempSync("/tmp/lcroll-");
process.env.TMPDIR = temp;
const gatewayBuilt = existsSync(join(ANCHORS, "envoy-gateway"));
const gatewayError = join(ANCHORS, "envoy-gateway.error");
const left: { id: string; why: string }[] = gatewayBuilt ? [] : [{
  id: "envoy-gateway",
  why: existsSync(gatewayError)
    ? readFileSync(gatewayError, "utf8").trim()
    : `${join(ANCHORS, "envoy-gateway")} was not built`,
}];
const contenders = ROLLOUT_CONTENDERS.filter((c) =>
  (!PICKED || PICKED.includes(c.id)) && (gatewayBuilt || c.id !== "envoy-gateway")
);

const runs: RolloutRun[] = [];
const errors: { workload: string; contender: string; round: number; error: string }[] = [];
const began = Date.now();
let cluster: KubeCluster | undefined;
let stopping: Promise<unknown> | undefined;
const stopAll = () => (stopping ??= (async () => {
  if (cluster && KEEP_LOGS) {
    cpSync(join(cluster.dir, "log"), KEEP_LOGS, { recursive: true });
    log(`the cluster's logs (kubelet, containerd, …) copied to ${KEEP_LOGS}`);
  }
  const took = cluster
    ? await cluster.stop().catch((e) => log(`teardown failed: ${e}`))
    : undefined;
  if (took) log(`cluster torn down in ${Math.round(took / 1000)} s`);
  rmSync(temp, { recursive: true, force: true });
})());
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => void stopAll().finally(() => process.exit(130)));
}

try {
  let t = Date.now();
  const built = await buildImages({ log });
  const anchors = await anchorsImage(built.envoy, [
    "istio-agent",
    "contour",
    ...(gatewayBuilt ? ["envoy-gateway"] : []),
  ]);
  const images = { lastcall: built.lastcall, node: built.node, anchors };
  log(
    `images ready in ${Math.round((Date.now() - t) / 1000)} s: ${Object.values(images).join(", ")}`,
  );
  t = Date.now();
  cluster = await startKubeCluster();
  await importPodmanImages(cluster, [images.lastcall, images.node, images.anchors]);
  log(`cluster up and images imported in ${Math.round((Date.now() - t) / 1000)} s`);
  for (let r = 0; r < ROUNDS; r++) {
    for (const workload of WORKLOADS) {
      for (let k = 0; k < contenders.length; k++) {
        const contender = contenders[(k + r) % contenders.length]!;
        const started = Date.now();
        try {
          const pod = { replicas: REPLICAS, graceS: GRACE_S, appPreStopS: workload.appPreStopS };
          const run = await rolloutOnce({
            cluster,
            contender,
            images,
            round: r,
            workload: workload.id,
            pod,
            load: LOAD,
            warmUpAnswers: WARM_UP_ANSWERS,
            restartDelayMs: Math.round((r * RELIST_PERIOD_MS) / ROUNDS),
            log,
          });
          runs.push(run);
          const by = Object.entries(run.load.failedByClass).filter(([, n]) => n > 0).map(([c, n]) =>
            `${c} ${n}`
          ).join(", ");
          log(
            `${workload.id} round ${
              r + 1
            }/${ROUNDS} ${contender.id}: failed ${run.load.failed} of ${run.load.sent}${
              by ? ` (${by})` : ""
            }, rollout ${(run.rollout_ms / 1000).toFixed(1)} s, new pods Ready after ${
              run.new_pods.map((p) => (p.ready_ms / 1000).toFixed(1)).join(", ")
            } s, pods gone after ${
              run.pods.map((p) => (p.termination_ms / 1000).toFixed(1)).join(", ")
            } s, relists ${run.relists.interval_mean_ms} ms apart (each ${run.relists.duration_mean_ms} ms), host CPU ${
              Math.round(run.relists.host_cpu_busy * 100)
            } % (${Math.round((Date.now() - started) / 1000)} s in all)`,
          );
          for (const f of run.load.first_failures.slice(0, 3)) {
            log(`  ${f.kind} ${f.class} at ${f.at_ms} ms: ${f.error}`);
          }
        } catch (error) {
          errors.push({
            workload: workload.id,
            contender: contender.id,
            round: r,
            error: String(error).slice(0, 4000),
          });
          log(
            `${workload.id} round ${r + 1}/${ROUNDS} ${contender.id}: ERROR ${
              String(error).split("\n").slice(0, 3).join(" | ")
            }`,
          );
        }
        save(false);
      }
    }
  }
  save(true);
} finally {
  await stopAll();
}
log(`done in ${Math.round((Date.now() - began) / 1000)} s`);

/** Per contender: totals and medians over its runs of one workload, and ratios to lastcall native's. */
function summarizeWorkload(workload: string) {
  const summary = contenders.map((c) => {
    const mine = runs.filter((run) => run.workload === workload && run.contender === c.id);
    const pods = mine.flatMap((run) => run.pods);
    const byClass: Record<string, number> = {};
    for (const run of mine) {
      for (const [cls, n] of Object.entries(run.load.failedByClass)) {
        byClass[cls] = (byClass[cls] ?? 0) + n;
      }
    }
    return {
      id: c.id,
      label: c.label,
      shape: c.shape,
      runs: mine.length,
      sent: mine.reduce((a, run) => a + run.load.sent, 0),
      failed_total: mine.reduce((a, run) => a + run.load.failed, 0),
      failed: summarize(mine.map((run) => run.load.failed), 0),
      failed_by_class: byClass,
      rollout_ms: summarize(mine.map((run) => run.rollout_ms), 0),
      all_old_gone_ms: summarize(mine.map((run) => run.all_old_gone_ms), 0),
      termination_ms: summarize(pods.map((p) => p.termination_ms), 0),
      // A new pod's creation → Ready: what each step of the rollout waits for.
      new_pod_ready_ms: summarize(
        mine.flatMap((run) => (run.new_pods ?? []).map((p) => p.ready_ms)),
        0,
      ),
      // Containers that ended with 137 (SIGKILL: the grace period ran out, or the kubelet killed it).
      sigkilled_containers: pods.reduce(
        (a, p) => a + Object.values(p.exits).filter((code) => code === 137).length,
        0,
      ),
      vs_lastcall_native: undefined as undefined | { rollout: number; termination: number },
    };
  }).filter((c) => c.runs > 0);
  const base = summary.find((c) => c.id === "lastcall-native");
  for (const c of summary) {
    if (base) {
      c.vs_lastcall_native = {
        rollout: round(c.rollout_ms.median / base.rollout_ms.median, 2),
        termination: round(c.termination_ms.median / base.termination_ms.median, 2),
      };
    }
  }
  return summary;
}

function save(complete: boolean): void {
  writeResult("rollout", {
    what:
      "kubectl rollout restart of a 3-replica Deployment behind a Service under constant load, on a real single-node Kubernetes v1.34.4: failed requests, rollout duration, per-pod termination, per contender",
    complete,
    kubernetes:
      "v1.34.4 (kubelet, kube-proxy iptables, containerd 1.6, runc), single node, built here (build/kube.mjs)",
    replicas: REPLICAS,
    grace_s: GRACE_S,
    load: LOAD,
    rounds: ROUNDS,
    seconds: round((Date.now() - began) / 1000, 1),
    left_out: left,
    errors,
    summary: WORKLOADS.map((w) => ({
      workload: w.id,
      what: w.what,
      app_prestop_s: w.appPreStopS,
      contenders: summarizeWorkload(w.id),
    })).filter((w) => w.contenders.length > 0),
    runs,
  });
}
