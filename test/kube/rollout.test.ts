// lastcall under a real kubelet: an injected Deployment rolled out under constant load, with no
// failed request.
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../support/envoy.ts";
import type { KubeCluster } from "../support/kube.ts";
import { startLoad } from "../support/kube-load.ts";
import {
  type ApiObject,
  type DemoCluster,
  demoClusterSkipReason,
  demoJob,
  eventRows,
  followLogs,
  inject,
  kubeletRows,
  plainDeployment,
  removeDemo,
  startDemoCluster,
  type TimelineRow,
  watchApi,
} from "../support/kube-workload.ts";
import { serviceAnswers } from "../support/kube-service.ts";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const GRACE_S = 30;
const skip = demoClusterSkipReason();

type Mode = "native" | "classic";

if (skip) {
  it.skip(`real kubelet: ${skip}`, () => {});
} else {
  describe("lastcall under a real kubelet (single-node Kubernetes v1.34.4)", () => {
    let cluster: KubeCluster;
    let built: DemoCluster["images"];
    let timings: Record<string, number> = {};

    beforeAll(async () => {
      ({ cluster, images: built, timings } = await startDemoCluster());
    }, 30 * 60_000);

    afterAll(async () => {
      if (cluster) timings.teardown_ms = await cluster.stop();
      console.log(
        `real kubelet timings: ${JSON.stringify({ ...timings, ...(cluster?.timings ?? {}) })}`,
      );
    }, 120_000);

    const modeArgs = (mode: Mode) => (mode === "classic" ? ["--mode", "classic"] : []);
    // The Job calls out through its sidecar (127.0.0.1:10000): the demo's Envoy config.
    const jobArgs = (
      mode: Mode,
    ) => ["--image", built.lastcall, "--config-map", "lastcall-demo-envoy", ...modeArgs(mode)];

    async function rolloutUnderLoad(mode: Mode) {
      const started = Date.now();
      const manifest = await inject(
        plainDeployment({ nodeImage: built.node, replicas: 2, grace: GRACE_S }),
        ["--image", built.lastcall, ...modeArgs(mode)],
      );
      await cluster.kubectl(["apply", "-f", "-"], manifest);
      const ip = await serving().catch(async (error) => {
        await removeDemo(cluster);
        throw error;
      });
      const url = `http://${ip}`;
      const oldPods = (await cluster.kubectl([
        "get",
        "pods",
        "-l",
        "app=demo",
        "-o",
        "jsonpath={.items[*].metadata.name}",
      ])).trim().split(/\s+/);
      const pod = oldPods.sort()[0];
      const pods = watchApi(cluster, "/api/v1/namespaces/default/pods?labelSelector=app%3Ddemo");
      const slices = watchApi(
        cluster,
        "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Ddemo",
      );
      const logs = followLogs(cluster, pod, "lastcall");
      const appLogs = followLogs(cluster, pod, "app");
      const load = startLoad({ url, slowEveryMs: 1000 });
      try {
        await waitFor(() => (load.ok >= 30 ? true : undefined), {
          timeoutMs: 30_000,
          intervalMs: 50,
          what: "30 answers before the rollout",
        });
        const restartAt = Date.now();
        await cluster.kubectl(["rollout", "restart", "deployment/demo"]);
        await cluster.kubectl(["rollout", "status", "deployment/demo", "--timeout=180s"]);
        const rolledAt = Date.now();
        const gone = (name: string) =>
          pods.events.some((e) => e.type === "DELETED" && e.object.metadata.name === name);
        await waitFor(() => (oldPods.every(gone) ? true : undefined), {
          timeoutMs: GRACE_S * 1000 + 30_000,
          intervalMs: 100,
          what: `old pods ${oldPods.join(", ")} gone`,
        });
        const summary = await load.stop();
        await Promise.all([logs.ended, appLogs.ended]);
        const timeline = podTimeline(mode, pod, {
          pods: pods.events,
          slices: slices.events,
          lastcall: logs.lines,
          app: appLogs.lines,
          restartAt,
          rolledAt,
        });
        timeline.events.push(
          ...await eventRows(cluster, pod, timeline.t0),
          ...kubeletRows(cluster, pod, timeline.t0),
        );
        timeline.events.sort((a, b) => a.at_ms - b.at_ms);
        Object.assign(timeline, {
          load: { ...summary, failed: summary.failed.slice(0, 20) },
          test_ms: Date.now() - started,
        });
        const file = join(
          root,
          ".cache",
          "kube",
          mode === "native" ? "pod-timeline.json" : `pod-timeline-${mode}.json`,
        );
        mkdirSync(join(root, ".cache", "kube"), { recursive: true });
        writeFileSync(file, `${JSON.stringify(timeline, null, 2)}\n`);
        return {
          summary,
          timeline,
          text: `${file}:\n${
            timeline.events.map((r) => `${String(r.at_ms).padStart(7)} ms  ${r.who}: ${r.what}`)
              .join("\n")
          }`,
        };
      } finally {
        pods.stop();
        slices.stop();
        await load.stop();
        await removeDemo(cluster);
      }
    }

    /** The applied Deployment rolled out and its Service's ClusterIP answering; the IP. */
    async function serving(): Promise<string> {
      await cluster.kubectl(["rollout", "status", "deployment/demo", "--timeout=180s"]);
      const ip =
        (await cluster.kubectl(["get", "service", "demo", "-o", "jsonpath={.spec.clusterIP}"]))
          .trim();
      // kube-proxy programs the rules a moment after the slice: wait for the ClusterIP itself.
      await serviceAnswers(cluster, `http://${ip}`);
      return ip;
    }

    for (const mode of ["native", "classic"] as const) {
      it(
        `${mode}: rollout restart under constant load through the Service: 0 failed requests, every answer whole`,
        async () => {
          const { summary, timeline, text } = await rolloutUnderLoad(mode);
          const t = timeline.events;
          const explain = `${JSON.stringify(summary.failed.slice(0, 5))}\n${text}`;
          expect(summary.failed, explain).toEqual([]);
          expect(summary.okByKind.long, explain).toBeGreaterThan(10);
          expect(summary.okByKind["new-connection"], explain).toBeGreaterThan(50);
          expect(summary.okByKind["slow-reader"], explain).toBeGreaterThan(3);
          // lastcall's own account of the pod's end: SIGTERM, nothing in flight at the stop.
          const lastcall = (name: string) =>
            t.find((r) =>
              r.who === "lastcall" && (r.what === name || r.what.startsWith(`${name} `))
            );
          expect(lastcall("terminate"), explain).toBeDefined();
          expect(lastcall("terminated")?.what, explain).toContain("inflight_at_stop=0");
          const killing = (container: string) =>
            t.find((r) =>
              r.who === "kubelet (log)" &&
              r.what === `Killing container with a grace period (${container})`
            );
          const app = (name: string) => t.find((r) => r.who === "app" && r.what === name);
          expect(killing("app"), explain).toBeDefined();
          // The app's preStop (inject's GET /v1/app-stop) was asked during the drain and, with
          // nothing left for Envoy once the app stops (inject's config has no outbound
          // listener), answered once Envoy had stopped; only then did the kubelet send the app
          // its SIGTERM: no request could reach it after.
          expect(lastcall("app_stop_asked"), explain).toBeDefined();
          expect(lastcall("app_stop")!.what, explain).toMatch(/reason=(quiet|deadline)/);
          expect(lastcall("app_stop")!.at_ms, explain).toBeGreaterThanOrEqual(
            lastcall("epoch_exit")!.at_ms,
          );
          expect(app("app_sigterm")!.at_ms, explain).toBeGreaterThanOrEqual(
            lastcall("app_stop")!.at_ms,
          );
          expect(app("app_exit"), explain).toBeDefined();
          if (mode === "native") {
            // The kubelet ran inject's preStop at the deletion: lastcall, the container's PID 1,
            // got SIGUSR2; the app's hook then began the termination itself, and the sidecar
            // exited before the app, never started again (the pod was ending).
            expect(lastcall("drain_start")!.what, explain).toContain("source=SIGUSR2");
            expect(lastcall("terminate")!.what, explain).toContain("source=app-stop");
            const sidecar = t.filter((r) => r.what.startsWith("container lastcall "));
            expect(sidecar.at(-1)?.what, explain).toBe("container lastcall terminated (exit 0)");
            expect(t.filter((r) => r.who === "lastcall" && r.what === "start"), explain)
              .toHaveLength(1);
          } else {
            // Both are told to stop at once: the sidecar's SIGTERM starts the drain while the
            // app's preStop waits.
            expect(killing("lastcall"), explain).toBeDefined();
            expect(lastcall("terminate")!.what, explain).toContain("source=SIGTERM");
            expect(lastcall("drain_start")!.what, explain).toContain("source=SIGTERM");
          }
          const deleted = t.find((r) => r.what === "pod object deleted");
          expect(deleted!.at_ms, explain).toBeLessThan(GRACE_S * 1000);
        },
        10 * 60_000,
      );
    }

    for (const mode of ["native", "classic"] as const) {
      it(`${mode}: a Job completes; its app called through the sidecar`, async () => {
        const manifest = await inject(
          demoJob({ nodeImage: built.node, grace: GRACE_S }),
          jobArgs(mode),
        );
        await cluster.kubectl(["apply", "-f", "-"], manifest);
        try {
          await cluster.kubectl([
            "wait",
            "--for=condition=Complete",
            "job/demo-job",
            "--timeout=120s",
          ]).catch(async (error) => {
            throw new Error(
              `${error.message}\n${await cluster.kubectl(["describe", "job/demo-job"]).catch(() =>
                ""
              )}\n${await cluster.kubectl(["get", "pods", "-o", "wide"])}`,
            );
          });
          const log = await cluster.kubectl(["logs", "job/demo-job", "-c", "job"]);
          expect(log).toContain("job got 200 hello from the demo app (/slow, after 1000 ms)");
        } finally {
          await cluster.kubectl([
            "delete",
            "job/demo-job",
            "--cascade=foreground",
            "--wait=true",
            "--timeout=60s",
          ]).catch(() => "");
        }
      }, 5 * 60_000);
    }
  });
}

/** Merges what the watches and lastcall's log saw for `pod` into rows, ms after its deletion was seen. */
function podTimeline(mode: Mode, pod: string, seen: {
  pods: Array<{ at: number; type: string; object: ApiObject }>;
  slices: Array<{ at: number; type: string; object: ApiObject }>;
  lastcall: Array<{ at: number; line: string }>;
  app: Array<{ at: number; line: string }>;
  restartAt: number;
  rolledAt: number;
}) {
  const mine = seen.pods.filter((e) => e.object.metadata.name === pod);
  const t0 = mine.find((e) => e.object.metadata.deletionTimestamp)?.at ?? seen.restartAt;
  const ip = mine.find((e) => e.object.status?.podIP)?.object.status.podIP;
  const events: TimelineRow[] = [
    { at_ms: seen.restartAt - t0, who: "test", what: "kubectl rollout restart" },
    { at_ms: seen.rolledAt - t0, who: "test", what: "kubectl rollout status returned" },
  ];
  const states = new Map<string, string>();
  for (const e of mine) {
    if (e.type === "DELETED") {
      events.push({ at_ms: e.at - t0, who: "api watch", what: "pod object deleted" });
    } else if (e.at === t0) {
      events.push({
        at_ms: 0,
        who: "api watch",
        what: `deletionTimestamp set (grace ${e.object.metadata.deletionGracePeriodSeconds} s)`,
      });
    }
    const statuses = [
      ...(e.object.status?.initContainerStatuses ?? []),
      ...(e.object.status?.containerStatuses ?? []),
    ];
    for (const c of statuses) {
      const state = c.state?.terminated
        ? `terminated (exit ${c.state.terminated.exitCode})`
        : c.state?.running
        ? `running ready=${c.ready}`
        : "waiting";
      if (states.get(c.name) === state) continue;
      if (states.has(c.name) || e.at >= t0) {
        events.push({ at_ms: e.at - t0, who: "api watch", what: `container ${c.name} ${state}` });
      }
      states.set(c.name, state);
    }
  }
  let lastSlice = "";
  for (const e of seen.slices) {
    const endpoint = (e.object.endpoints ?? []).find((p: ApiObject) => p.addresses?.includes(ip));
    const what = endpoint
      ? `endpoint ${ip} ready=${endpoint.conditions.ready} serving=${endpoint.conditions.serving} terminating=${endpoint.conditions.terminating}`
      : `endpoint ${ip} removed`;
    if (what !== lastSlice && (endpoint || lastSlice)) {
      events.push({ at_ms: e.at - t0, who: "endpointslice watch", what });
    }
    lastSlice = what;
  }
  for (const [who, lines] of [["lastcall", seen.lastcall], ["app", seen.app]] as const) {
    for (const { line } of lines) {
      try {
        const { ts, event, ...fields } = JSON.parse(line);
        const detail = Object.entries(fields).filter(([k]) =>
          ["source", "inflight_at_stop", "mode", "reason", "signal", "waited_ms"].includes(k)
        ).map(([k, v]) => `${k}=${v}`).join(" ");
        events.push({
          at_ms: Date.parse(ts) - t0,
          who,
          what: `${event}${detail ? ` ${detail}` : ""}`,
        });
      } catch {
        // not an event line
      }
    }
  }
  return {
    recorded: new Date(t0).toISOString(),
    kubernetes: "v1.34.4 (kubelet, containerd 1.6, runc)",
    mode,
    pod,
    grace_s: GRACE_S,
    t0,
    events,
  };
}
