// A liveness restart on a real kubelet: the kubelet runs an app container's preStop before it
// restarts it, and inject's preStop is lastcall's `GET /v1/app-stop`. With no drain under way,
// lastcall answers it after its 1 s (`no_drain`): the restart goes on, the pod is not drained.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../support/envoy.ts";
import type { KubeCluster } from "../support/kube.ts";
import {
  type DemoCluster,
  demoClusterSkipReason,
  followLogs,
  inject,
  kubeletRows,
  plainDeployment,
  removeDemo,
  startDemoCluster,
} from "../support/kube-workload.ts";
import { root } from "../support/paths.ts";

const skip = demoClusterSkipReason();

/** The demo Deployment, its app alive while /tmp/dead does not exist (checked every second). */
const liveness = (nodeImage: string) =>
  plainDeployment({ nodeImage, replicas: 1 }).replace(
    "        volumeMounts:",
    "        livenessProbe: {exec: {command: [sh, -c, 'test ! -e /tmp/dead']}, periodSeconds: 1, failureThreshold: 1}\n        volumeMounts:",
  );

if (skip) {
  it.skip(`real kubelet: ${skip}`, () => {});
} else {
  describe("a liveness restart of an injected app (single-node Kubernetes v1.34.4)", () => {
    let cluster: KubeCluster;
    let images: DemoCluster["images"];

    beforeAll(async () => {
      ({ cluster, images } = await startDemoCluster());
    }, 30 * 60_000);

    afterAll(async () => {
      if (cluster) await cluster.stop();
    }, 120_000);

    for (const mode of ["native", "classic"] as const) {
      it(
        `${mode}: the app's preStop answers no_drain, the app restarts, lastcall does not drain`,
        async () => {
          const manifest = await inject(liveness(images.node), [
            "--image",
            images.lastcall,
            ...(mode === "classic" ? ["--mode", "classic"] : []),
          ]);
          expect(manifest).toContain("path: /v1/app-stop");
          await cluster.kubectl(["apply", "-f", "-"], manifest);
          try {
            await cluster.kubectl(["rollout", "status", "deployment/demo", "--timeout=180s"]);
            const pod = (await cluster.kubectl([
              "get",
              "pods",
              "-l",
              "app=demo",
              "-o",
              "jsonpath={.items[0].metadata.name}",
            ])).trim();
            const logs = followLogs(cluster, pod, "lastcall");
            const killedAt = Date.now();
            await cluster.kubectl(["exec", pod, "-c", "app", "--", "touch", "/tmp/dead"]);
            const restarts = async () =>
              Number(
                (await cluster.kubectl([
                  "get",
                  "pod",
                  pod,
                  "-o",
                  'jsonpath={.status.containerStatuses[?(@.name=="app")].restartCount}',
                ])).trim() || 0,
              );
            await waitFor(async () => ((await restarts()) >= 1 ? true : undefined), {
              timeoutMs: 60_000,
              intervalMs: 100,
              what: "the app restarted",
            });
            await cluster.kubectl(["wait", "--for=condition=Ready", `pod/${pod}`, "--timeout=60s"]);
            const events = logs.lines.flatMap(({ line }) => {
              try {
                return [
                  JSON.parse(line) as {
                    ts: string;
                    event: string;
                    reason?: string;
                    waited_ms?: number;
                  },
                ];
              } catch {
                return [];
              }
            });
            const answer = events.find((e) => e.event === "app_stop");
            const previous = await cluster.kubectl(["logs", pod, "-c", "app", "--previous"]);
            const sigterm = previous.split("\n").filter(Boolean).map((l) => JSON.parse(l)).find((
              e: { event: string },
            ) => e.event === "app_sigterm");
            const rows = kubeletRows(cluster, pod, killedAt).filter((r) =>
              r.what.includes("(app)")
            );
            const explain = JSON.stringify({ events, sigterm, rows }, null, 1);
            expect(events.some((e) => e.event === "app_stop_asked"), explain).toBe(true);
            expect(answer, explain).toMatchObject({ reason: "no_drain" });
            expect(events.some((e) => e.event === "drain_start"), explain).toBe(false);
            // The kubelet sent the SIGTERM once the hook had its answer.
            expect(Date.parse(sigterm.ts), explain).toBeGreaterThanOrEqual(Date.parse(answer!.ts));
            // What the hook cost the restart, for the docs: .cache/kube/liveness-<mode>.json.
            const asked = Date.parse(events.find((e) => e.event === "app_stop_asked")!.ts);
            mkdirSync(join(root, ".cache", "kube"), { recursive: true });
            writeFileSync(
              join(root, ".cache", "kube", `liveness-${mode}.json`),
              `${
                JSON.stringify(
                  {
                    waited_ms: answer!.waited_ms,
                    sigterm_after_asked_ms: Date.parse(sigterm.ts) - asked,
                    kubelet: rows,
                  },
                  null,
                  2,
                )
              }\n`,
            );
            logs.ended.catch(() => {});
          } finally {
            await removeDemo(cluster);
          }
        },
        5 * 60_000,
      );
    }
  });
}
