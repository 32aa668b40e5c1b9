// Contour's Envoy DaemonSet shape under a real kubelet: every request in flight is answered when
// the pod is deleted. The manifest it applies is built in contour-manifest.ts.
import { mkdirSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../support/envoy.ts";
import type { KubeCluster } from "../support/kube.ts";
import {
  type DemoCluster,
  demoClusterSkipReason,
  demoDeployment,
  eventRows,
  followLogs,
  inject,
  kubeletRows,
  startDemoCluster,
  type TimelineRow,
  watchApi,
} from "../support/kube-workload.ts";
import { serviceAnswers } from "../support/kube-service.ts";
import { contourManifest, NS } from "./contour-manifest.ts";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
/** The long requests in flight when the pod is deleted (ms at the app). */
const LONG_MS = [3000, 6000, 10_000];
const skip = demoClusterSkipReason();

interface Answer {
  ms: number;
  sent: number;
  at: number;
  status?: number;
  whole: boolean;
  error?: string;
}

/** One `/slow?ms=N` on a connection of its own; resolves with what came back, never rejects. */
function longRequest(url: string, ms: number): Promise<Answer> {
  const sent = Date.now();
  const expected = `hello from the demo app (/slow, after ${ms} ms)\n`;
  return new Promise((done) => {
    const req = request(`${url}/slow?ms=${ms}`, { agent: false, timeout: ms + 60_000 }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (chunk) => (body += chunk));
      res.once(
        "error",
        (error) =>
          done({
            ms,
            sent,
            at: Date.now(),
            status: res.statusCode,
            whole: false,
            error: error.message,
          }),
      );
      res.once(
        "end",
        () =>
          done({
            ms,
            sent,
            at: Date.now(),
            status: res.statusCode,
            whole: res.complete && body === expected,
          }),
      );
    });
    req.once("timeout", () => req.destroy(new Error("no answer in time")));
    req.once(
      "error",
      (error) =>
        done({
          ms,
          sent,
          at: Date.now(),
          whole: false,
          error: `${(error as NodeJS.ErrnoException).code ?? ""} ${error.message}`,
        }),
    );
    req.end();
  });
}

/** lastcall's JSON event lines of one container as rows. */
function lastcallRows(who: string, lines: Array<{ line: string }>, t0: number): TimelineRow[] {
  return lines.flatMap(({ line }) => {
    try {
      const { ts, event, ...fields } = JSON.parse(line);
      const detail = Object.entries(fields).filter(([k]) =>
        ["source", "inflight_at_stop", "reason", "count", "what", "status"].includes(k)
      ).map(([k, v]) => `${k}=${v}`).join(" ");
      return [{ at_ms: Date.parse(ts) - t0, who, what: `${event}${detail ? ` ${detail}` : ""}` }];
    } catch {
      return []; // not an event line
    }
  });
}

function findRow(rows: TimelineRow[], who: string, what: string): TimelineRow | undefined {
  return rows.find((r) => r.who === who && (r.what === what || r.what.startsWith(`${what} `)));
}

if (skip) {
  it.skip(`real kubelet: ${skip}`, () => {});
} else {
  describe("Contour's Envoy DaemonSet with lastcall's image under a real kubelet", () => {
    let cluster: KubeCluster;
    let images: DemoCluster["images"];
    let timings: Record<string, number> = {};
    /** The first test's timeline, for the second. */
    let seen: { rows: TimelineRow[]; explain: string } | undefined;

    beforeAll(async () => {
      ({ cluster, images, timings } = await startDemoCluster());
    }, 30 * 60_000);

    afterAll(async () => {
      if (cluster) timings.teardown_ms = await cluster.stop();
      console.log(
        `real kubelet timings (contour): ${
          JSON.stringify({ ...timings, ...(cluster?.timings ?? {}) })
        }`,
      );
    }, 120_000);

    it(
      "pod deleted with long requests in flight: 0 cut, envoy's preStop held and its SIGTERM sent only after the drain, pod gone well before its 300 s grace",
      async () => {
        const started = Date.now();
        const kubectl = cluster.kubectl;
        const demo = await inject(demoDeployment({ nodeImage: images.node, replicas: 1 }), [
          "--image",
          images.lastcall,
          "--config-map",
          "lastcall-demo-envoy",
        ]);
        await kubectl(["apply", "-f", "-"], demo);
        const pods = watchApi(cluster, `/api/v1/namespaces/${NS}/pods?labelSelector=app%3Denvoy`);
        try {
          await kubectl(["rollout", "status", "deployment/demo", "--timeout=180s"]);
          const demoIp =
            (await kubectl(["get", "service", "demo", "-o", "jsonpath={.spec.clusterIP}"])).trim();
          const { text, grace } = contourManifest(images.lastcall, demoIp);
          await kubectl(["apply", "-f", "-"], text);
          await kubectl(["-n", NS, "rollout", "status", "daemonset/envoy", "--timeout=180s"]).catch(
            async (error) => {
              throw new Error(
                `${error.message}\n${await kubectl(["-n", NS, "describe", "pods"]).catch(() =>
                  ""
                )}`,
              );
            },
          );
          const pod = (await kubectl([
            "-n",
            NS,
            "get",
            "pods",
            "-l",
            "app=envoy",
            "-o",
            "jsonpath={.items[0].metadata.name} {.items[0].status.podIP}",
          ])).trim();
          const [name, podIp] = pod.split(" ");
          const url = `http://${
            (await kubectl([
              "-n",
              NS,
              "get",
              "service",
              "envoy",
              "-o",
              "jsonpath={.spec.clusterIP}",
            ])).trim()
          }`;
          // kube-proxy programs the rules a moment after the slice: wait for the ClusterIP itself.
          await serviceAnswers(cluster, url);
          const manager = followLogs(cluster, name!, "shutdown-manager", NS);
          const envoy = followLogs(cluster, name!, "envoy", NS);

          const answers = Promise.all(LONG_MS.map((ms) => longRequest(url, ms)));
          // In flight at Envoy: its own count, from Contour's stats listener.
          const active = async () =>
            Number(
              /http\.ingress_http\.downstream_rq_active: (\d+)/.exec(
                await (await fetch(`http://${podIp}:8002/stats?filter=downstream_rq_active`))
                  .text(),
              )?.[1] ?? 0,
            );
          await waitFor(async () => ((await active()) >= LONG_MS.length ? true : undefined), {
            timeoutMs: 10_000,
            intervalMs: 50,
            what: `${LONG_MS.length} requests in flight at Envoy`,
          });
          const deleteAt = Date.now();
          await kubectl(["-n", NS, "delete", "pod", name!, "--wait=false"]);
          const answered = await answers;
          await waitFor(
            () => (pods.events.some((e) => e.type === "DELETED" && e.object.metadata.name === name)
              ? true
              : undefined),
            { timeoutMs: grace * 1000 + 30_000, intervalMs: 100, what: `pod ${name} gone` },
          );
          await Promise.all([manager.ended, envoy.ended]);

          // The timeline, ms after the deletion was seen on the watch.
          const mine = pods.events.filter((e) => e.object.metadata.name === name);
          const t0 = mine.find((e) => e.object.metadata.deletionTimestamp)?.at ?? deleteAt;
          const rows: TimelineRow[] = [{
            at_ms: deleteAt - t0,
            who: "test",
            what: `kubectl delete pod (${LONG_MS.length} requests in flight)`,
          }];
          for (const a of answered) {
            rows.push({
              at_ms: a.at - t0,
              who: "client",
              what: `/slow?ms=${a.ms} sent at ${a.sent - t0} ms: ${a.status ?? a.error}${
                a.whole ? " whole" : " NOT whole"
              }`,
            });
          }
          const states = new Map<string, string>();
          for (const e of mine) {
            if (e.type === "DELETED") {
              rows.push({ at_ms: e.at - t0, who: "api watch", what: "pod object deleted" });
            } else if (e.at === t0) {
              rows.push({
                at_ms: 0,
                who: "api watch",
                what:
                  `deletionTimestamp set (grace ${e.object.metadata.deletionGracePeriodSeconds} s)`,
              });
            }
            for (const c of e.object.status?.containerStatuses ?? []) {
              const state = c.state?.terminated
                ? `terminated (exit ${c.state.terminated.exitCode})`
                : c.state?.running
                ? `running ready=${c.ready}`
                : "waiting";
              if (states.get(c.name) !== state && e.at >= t0) {
                rows.push({
                  at_ms: e.at - t0,
                  who: "api watch",
                  what: `container ${c.name} ${state}`,
                });
              }
              states.set(c.name, state);
            }
          }
          rows.push(
            ...lastcallRows("shutdown-manager", manager.lines, t0),
            ...lastcallRows("envoy (lastcall run)", envoy.lines, t0),
          );
          rows.push(
            ...await eventRows(cluster, name!, t0, NS),
            ...kubeletRows(cluster, name!, t0, NS),
          );
          rows.sort((a, b) => a.at_ms - b.at_ms);
          const file = join(root, ".cache", "kube", "pod-timeline-contour.json");
          mkdirSync(dirname(file), { recursive: true });
          const timeline = {
            recorded: new Date(t0).toISOString(),
            kubernetes: "v1.34.4 (kubelet, containerd 1.6, runc)",
            shape: "examples/k8s/contour-envoy.yaml",
            pod: name,
            grace_s: grace,
            t0,
            events: rows,
            test_ms: Date.now() - started,
          };
          writeFileSync(file, `${JSON.stringify(timeline, null, 2)}\n`);
          const explain = `${file}:\n${
            rows.map((r) => `${String(r.at_ms).padStart(7)} ms  ${r.who}: ${r.what}`).join("\n")
          }`;
          console.log(explain);

          seen = { rows, explain };

          // Every request in flight answered whole: 0 cut.
          expect(answered.filter((a) => a.status !== 200 || !a.whole), explain).toEqual([]);
          const lastAnswer = Math.max(...answered.map((a) => a.at)) - t0;
          // The app answers no sooner than this: no drain can be over before it.
          const lastAppAnswer = Math.max(...answered.map((a) => a.sent + a.ms)) - t0;
          const find = (who: string, what: string) => findRow(rows, who, what);
          // The kubelet ran envoy's preStop GET :8090/shutdown at the deletion and it was held
          // past the last answer, while `lastcall shutdown` (the shutdown-manager's preStop)
          // drained; only then did the kubelet send envoy's container SIGTERM (its "Killing
          // container" line follows the preStop hook, kuberuntime_container.go).
          const requested = find("shutdown-manager", "shutdown_requested");
          expect(requested, explain).toBeDefined();
          expect(requested!.at_ms, explain).toBeLessThan(
            Math.min(...answered.map((a) => a.at)) - t0,
          );
          const killing = find("kubelet (log)", "Killing container with a grace period (envoy)");
          expect(killing, explain).toBeDefined();
          expect(killing!.at_ms, explain).toBeGreaterThanOrEqual(lastAppAnswer);
          expect(
            find("kubelet (log)", "Killing container with a grace period (shutdown-manager)")!
              .at_ms,
            explain,
          ).toBeGreaterThanOrEqual(lastAppAnswer);
          // lastcall run: its drain started by `lastcall shutdown`, its SIGTERM after the hook,
          // nothing in flight when it stopped Envoy.
          expect(find("envoy (lastcall run)", "drain_start")?.what, explain).toContain(
            "source=POST /drain",
          );
          const terminate = find("envoy (lastcall run)", "terminate");
          expect(terminate?.what, explain).toContain("source=SIGTERM");
          expect(terminate!.at_ms, explain).toBeGreaterThanOrEqual(killing!.at_ms);
          expect(find("envoy (lastcall run)", "terminated")?.what, explain).toContain(
            "inflight_at_stop=0",
          );
          expect(find("api watch", "container envoy terminated (exit 0)"), explain).toBeDefined();
          expect(find("api watch", "container shutdown-manager terminated (exit 0)"), explain)
            .toBeDefined();
          // Gone soon after the last answer (Contour's check interval is 5 s), far before the grace.
          const deleted = find("api watch", "pod object deleted")!;
          expect(deleted.at_ms, explain).toBeLessThan(lastAnswer + 5000 + 10_000);
          expect(deleted.at_ms, explain).toBeLessThan((grace * 1000) / 10);
        } finally {
          pods.stop();
          await kubectl(["delete", "namespace", NS, "--wait=true", "--timeout=120s"]).catch(() =>
            ""
          );
          await kubectl([
            "delete",
            "deployment/demo",
            "service/demo",
            "--wait=true",
            "--timeout=90s",
          ]).catch(() => "");
        }
      },
      10 * 60_000,
    );

    it("the same deletion: envoy's preStop GET /shutdown is answered 200 once `lastcall shutdown` drained (no FailedPreStopHook)", () => {
      expect(seen, "the deletion above did not run to its timeline").toBeDefined();
      const { rows, explain } = seen!;
      // `shutdown_ready`: the shutdown-manager saw the ready file and answered the held GET. The
      // kubelet sends the shutdown-manager SIGTERM as soon as its exec preStop (`lastcall
      // shutdown`) returns; if that SIGTERM closes the server before the 100 ms poll of the
      // ready file, the GET is cut and the kubelet logs "PreStop hook failed" for envoy.
      expect(findRow(rows, "shutdown-manager", "shutdown_ready"), explain).toBeDefined();
      expect(
        rows.filter((r) =>
          /PreStop hook failed|FailedPreStopHook|lifecycle hook .*failed/i.test(r.what)
        ),
        explain,
      ).toEqual([]);
    });
  });
}
