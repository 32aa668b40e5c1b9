// One rollout of one contender in the test cluster, with its failed requests and timings.
import { copyFileSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { podman } from "../../build/image.mjs";
import { waitFor } from "../../test/support/envoy.ts";
import { runCommand } from "../../test/support/kube-process.ts";
import type { KubeCluster } from "../../test/support/kube.ts";
import { type LoadOptions, type LoadSummary, startLoad } from "../../test/support/kube-load.ts";
import { followLogs, watchApi, type Watched } from "../../test/support/kube-workload.ts";
import { serviceAnswers } from "../../test/support/kube-service.ts";
import { ANCHORS } from "./context.ts";
import { relistReading, type RelistStretch, relistStretch } from "./kubelet-relist.ts";
import type { PodOptions, RolloutContender, RolloutImages } from "./rollout-pods.ts";

/** What one old pod did from its deletion to its end. */
export interface PodEnd {
  pod: string;
  /** deletionTimestamp seen → DELETED seen (ms); NaN when not seen. */
  termination_ms: number;
  /** When its deletion was seen, ms after the load started (to line up with the failures' times). */
  deleted_at_ms: number;
  /** Each container's last exit code (137: SIGKILLed, e.g. at the grace period). */
  exits: Record<string, number | null>;
  /** The agent's JSON event lines (lastcall's), ms after the deletion was seen, when it has some. */
  agent_events?: Array<{ at_ms: number; event: string; detail: string }>;
}

/** One measured rollout. */
export interface RolloutRun {
  workload: string;
  contender: string;
  round: number;
  /** The restart's phase: ms after a kubelet relist (as the initial pods' Ready placed it). */
  restart_delay_ms: number;
  /** `kubectl rollout restart` started → `kubectl rollout status` returned (ms). */
  rollout_ms: number;
  /** Restart → the last old pod gone (ms). */
  all_old_gone_ms: number;
  pods: PodEnd[];
  /** Each new pod: created (first seen) → Ready (ms). */
  new_pods: Array<{ pod: string; ready_ms: number }>;
  /** The kubelet's relists and the host's CPU from the restart to `rollout status` returning. */
  relists: RelistStretch;
  load: Omit<LoadSummary, "failed"> & { failed: number; first_failures: LoadSummary["failed"] };
}

/**
 * The Envoy base image plus the incumbents' Go binaries (.cache/anchors/bin: istio-agent,
 * contour, envoy-gateway when it was built), tagged by their sizes and times.
 *
 * @example
 * const anchors = await anchorsImage(built.envoy);
 */
export async function anchorsImage(envoyImage: string, binaries: string[]): Promise<string> {
  const { statSync } = await import("node:fs");
  const key = binaries.map((b) =>
    `${b}-${statSync(join(ANCHORS, b)).size}-${Math.round(statSync(join(ANCHORS, b)).mtimeMs)}`
  ).join("_");
  const { createHash } = await import("node:crypto");
  const tag = `localhost/lastcall-bench/anchors:${
    createHash("sha256").update(`${envoyImage} ${key}`).digest("hex").slice(0, 12)
  }`;
  const exists = await podman(["image", "exists", tag]).then(() => true, () => false);
  if (exists) return tag;
  const dir = mkdtempSync(join(tmpdir(), "lcroll-img-"));
  try {
    mkdirSync(join(dir, "bin"));
    for (const b of binaries) copyFileSync(join(ANCHORS, b), join(dir, "bin", b));
    const { writeFileSync } = await import("node:fs");
    writeFileSync(join(dir, "Containerfile"), `FROM ${envoyImage}\nCOPY bin/ /usr/local/bin/\n`);
    await podman([
      "build",
      "--quiet",
      "--layers=false",
      "--pull=never",
      "--network",
      "none",
      "-t",
      tag,
      "-f",
      join(dir, "Containerfile"),
      dir,
    ]);
    // Older builds of it (other binaries) do not pile up in podman's storage.
    const repository = tag.slice(0, tag.lastIndexOf(":"));
    const stale = (await podman(["images", "--format", "{{.Repository}}:{{.Tag}}", repository]))
      .split("\n").filter((t: string) => t && t !== tag && t.startsWith(`${repository}:`));
    if (stale.length > 0) await podman(["rmi", "--force", ...stale]).catch(() => {});
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return tag;
}

const names = (out: string) => out.trim().split(/\s+/).filter(Boolean);

/** Options of {@linkcode rolloutOnce}. */
export interface RolloutOnceOptions {
  cluster: KubeCluster;
  contender: RolloutContender;
  images: RolloutImages;
  round: number;
  workload: string;
  pod: PodOptions;
  load: Omit<LoadOptions, "url">;
  /** Complete answers before the restart. */
  warmUpAnswers: number;
  /**
   * The restart is sent this many ms after a relist of the kubelet (the first such moment after
   * the warm-up): the rounds spread it over the relist, and every contender meets the same
   * phases, whatever its warm-up took.
   * @default 0
   */
  restartDelayMs?: number;
  log(line: string): void;
}

/**
 * Deploys, rolls out under load, measures, and deletes what it applied (also on failure).
 *
 * @example
 * const run = await rolloutOnce({ cluster, contender, images, round: 0, workload: "w", pod: { replicas: 3, graceS: 30, appPreStopS: 0 }, load: {}, warmUpAnswers: 60, log });
 */
export async function rolloutOnce(options: RolloutOnceOptions): Promise<RolloutRun> {
  const { cluster, contender } = options;
  const kubectl = cluster.kubectl;
  const timeout = `--timeout=${options.pod.graceS * 3 + 120}s`;
  await kubectl(["apply", "-f", "-"], await contender.manifest(options.images, options.pod));
  const pods = watchApi(cluster, "/api/v1/namespaces/default/pods?labelSelector=app%3Ddemo");
  let load: ReturnType<typeof startLoad> | undefined;
  try {
    await kubectl(["rollout", "status", "deployment/demo", timeout]).catch(async (error) => {
      throw new Error(
        `${(error as Error).message}\n${await kubectl(["describe", "pods", "-l", "app=demo"]).catch(
          () => "",
        )}`.slice(0, 6000),
      );
    });
    const ip = (await kubectl(["get", "service", "demo", "-o", "jsonpath={.spec.clusterIP}"]))
      .trim();
    const url = `http://${ip}`;
    // kube-proxy programs the rules a moment after the slice: wait for the ClusterIP itself.
    await serviceAnswers(options.cluster, url);
    const oldPods = names(
      await kubectl(["get", "pods", "-l", "app=demo", "-o", "jsonpath={.items[*].metadata.name}"]),
    );
    const agentLogs = contender.agentContainer
      ? oldPods.map((pod) => followLogs(cluster, pod, contender.agentContainer!))
      : [];
    load = startLoad({ url, ...options.load });
    const running = load;
    await waitFor(() => (running.ok >= options.warmUpAnswers ? true : undefined), {
      timeoutMs: 60_000,
      intervalMs: 50,
      what: `${options.warmUpAnswers} answers before the rollout`,
    });
    // Read before the phase is placed: the reading's kubectl calls would move it.
    const before = await relistReading(kubectl);
    const relisted = firstReady(oldPods, pods.events);
    const wait = untilPhase(relisted, Date.now(), options.restartDelayMs ?? 0);
    await new Promise((done) => setTimeout(done, wait));
    const restartAt = Date.now();
    await kubectl(["rollout", "restart", "deployment/demo"]);
    await kubectl(["rollout", "status", "deployment/demo", timeout]);
    const rolledAt = Date.now();
    const relists = relistStretch(before, await relistReading(kubectl));
    const gone = (name: string) =>
      pods.events.some((e) => e.type === "DELETED" && e.object.metadata.name === name);
    await waitFor(() => (oldPods.every(gone) ? true : undefined), {
      timeoutMs: options.pod.graceS * 1000 + 60_000,
      intervalMs: 100,
      what: `old pods ${oldPods.join(", ")} gone`,
    });
    const lastGone = Math.max(
      ...pods.events.filter((e) => e.type === "DELETED" && oldPods.includes(e.object.metadata.name))
        .map((e) => e.at),
    );
    const summary = await load.stop();
    load = undefined;
    const { failed, ...rest } = summary;
    await attributeFailures(failed, ip, pods.events);
    await Promise.race([
      Promise.all(agentLogs.map((l) => l.ended)),
      new Promise((done) => setTimeout(done, 5000)),
    ]);
    const ends = oldPods.map((pod, i) => {
      const end = podEnd(pod, pods.events, summary.startedAt);
      if (agentLogs[i]) {
        end.agent_events = agentEvents(agentLogs[i]!.lines, summary.startedAt + end.deleted_at_ms);
      }
      return end;
    });
    return {
      workload: options.workload,
      contender: contender.id,
      round: options.round,
      restart_delay_ms: options.restartDelayMs ?? 0,
      rollout_ms: rolledAt - restartAt,
      all_old_gone_ms: lastGone - restartAt,
      pods: ends,
      new_pods: newPods(oldPods, pods.events),
      relists,
      load: { ...rest, failed: failed.length, first_failures: failed.slice(0, 30) },
    };
  } finally {
    pods.stop();
    await load?.stop();
    await kubectl([
      "delete",
      "deployment/demo",
      "service/demo",
      "configmap/rollout-envoy",
      "configmap/demo-lastcall-envoy",
      "--ignore-not-found",
      "--wait=true",
      "--timeout=120s",
    ]).catch((e) => options.log(`cleanup: ${String(e).split("\n")[0]}`));
    await waitFor(
      async () => ((await kubectl(["get", "pods", "-l", "app=demo", "-o", "name"])).trim() === ""
        ? true
        : undefined),
      { timeoutMs: 120_000, intervalMs: 250, what: "demo pods gone" },
    )
      .catch((e) => options.log(`cleanup: ${String(e).split("\n")[0]}`));
  }
}

/** An old pod's deletion → gone, and its containers' last exit codes, from the pod watch. */
function podEnd(pod: string, events: Watched[], loadStartedAt: number): PodEnd {
  const mine = events.filter((e) => e.object.metadata?.name === pod);
  const deleted = mine.find((e) => e.object.metadata.deletionTimestamp)?.at;
  const gone = mine.find((e) => e.type === "DELETED")?.at;
  const exits: Record<string, number | null> = {};
  for (const e of mine) {
    const statuses = [
      ...(e.object.status?.initContainerStatuses ?? []),
      ...(e.object.status?.containerStatuses ?? []),
    ];
    for (const c of statuses) {
      const ended = c.state?.terminated ?? c.lastState?.terminated;
      if (ended) exits[c.name] = ended.exitCode ?? null;
    }
  }
  return {
    pod,
    termination_ms: deleted !== undefined && gone !== undefined ? gone - deleted : Number.NaN,
    deleted_at_ms: (deleted ?? Number.NaN) - loadStartedAt,
    exits,
  };
}

/**
 * The kubelet's PLEG relist period here: one second after the last relist ended (`wait.Until`),
 * so a few ms more (median 1004 ms over 92 relists in this cluster's kubelet log). Round r of the
 * benchmark restarts r/rounds of it after a relist.
 */
export const RELIST_PERIOD_MS = 1004;

/** Whether a watched pod has condition Ready. */
function isReady(pod: Watched["object"]): boolean {
  return (pod.status?.conditions ?? []).some((c: { type: string; status: string }) =>
    c.type === "Ready" && c.status === "True"
  );
}

/**
 * When the first of `pods` was first seen Ready on the watch: a relist, plus a probe's few ms.
 * The first, not the last: pods started together on 2 cores answer their probes up to 0.2 s
 * after the relist that saw them (a probe held until Envoy is LIVE), which would place every
 * phase that much late.
 */
function firstReady(pods: string[], events: Watched[]): number {
  const ready = pods.map((pod) =>
    events.find((e) => e.object.metadata?.name === pod && isReady(e.object))?.at
  );
  if (ready.some((at) => at === undefined)) {
    throw new Error(`the pod watch saw no Ready for every pod of ${pods.join(", ")}`);
  }
  return Math.min(...(ready as number[]));
}

/** ms from `now` to the first moment at or after it that is `phaseMs` after a relist. */
function untilPhase(relistedAt: number, now: number, phaseMs: number): number {
  const next = relistedAt + phaseMs +
    Math.ceil((now - relistedAt - phaseMs) / RELIST_PERIOD_MS) * RELIST_PERIOD_MS;
  return Math.max(0, next - now);
}

/** Pods not among `oldPods`: first seen → first seen with condition Ready (NaN if never). */
function newPods(oldPods: string[], events: Watched[]): Array<{ pod: string; ready_ms: number }> {
  const seen = new Map<string, { added: number; ready?: number }>();
  for (const e of events) {
    const name = e.object.metadata?.name as string;
    if (oldPods.includes(name)) continue;
    const pod = seen.get(name) ?? { added: e.at };
    seen.set(name, pod);
    if (isReady(e.object) && pod.ready === undefined) pod.ready = e.at;
  }
  return [...seen].map(([pod, t]) => ({
    pod,
    ready_ms: t.ready === undefined ? Number.NaN : t.ready - t.added,
  }));
}

const DETAIL = ["source", "reason", "signal", "inflight", "inflight_at_stop", "mode", "waited_ms"];

/** lastcall's JSON event lines as rows, ms after `t0` (epoch ms). */
function agentEvents(
  lines: Array<{ at: number; line: string }>,
  t0: number,
): Array<{ at_ms: number; event: string; detail: string }> {
  const rows: Array<{ at_ms: number; event: string; detail: string }> = [];
  for (const { line } of lines) {
    try {
      const { ts, event, ...fields } = JSON.parse(line) as Record<string, unknown>;
      if (typeof event !== "string") continue;
      const detail = Object.entries(fields).filter(([k]) => DETAIL.includes(k)).map(([k, v]) =>
        `${k}=${v}`
      ).join(" ");
      rows.push({ at_ms: Date.parse(String(ts)) - t0, event, detail });
    } catch {
      // not an event line
    }
  }
  return rows;
}

/**
 * Names the pod each failed request reached: conntrack's entry for the client's port to the
 * ClusterIP (kept ~120 s after the close) gives the pod IP the Service sent it to.
 */
async function attributeFailures(
  failed: Array<{ local_port?: number; pod?: string }>,
  clusterIp: string,
  events: Watched[],
): Promise<void> {
  if (!failed.some((f) => f.local_port)) return;
  const { stdout } = await runCommand("conntrack", ["-L", "-p", "tcp", "--orig-dst", clusterIp], {
    timeoutMs: 10_000,
  });
  const podIp = new Map<string, string>();
  for (const e of events) {
    if (e.object.status?.podIP) podIp.set(e.object.status.podIP, e.object.metadata.name);
  }
  const bySport = new Map<number, string>();
  for (const line of stdout.split("\n")) {
    const sport = /sport=(\d+)/.exec(line)?.[1];
    const replySrc = /src=\S+ dst=\S+ sport=\d+ dport=\d+ .*?src=(\S+)/.exec(line)?.[1];
    if (sport && replySrc) bySport.set(Number(sport), podIp.get(replySrc) ?? replySrc);
  }
  for (const f of failed) if (f.local_port) f.pod = bySport.get(f.local_port);
}
