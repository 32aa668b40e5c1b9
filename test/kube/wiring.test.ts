// The user's flow on a real kubelet: `lastcall inject -f app.yaml | kubectl apply -f -`, nothing
// else applied (a Deployment with two ports, no preStop, and its Service as users write them):
// pods Ready, requests through Envoy counted by lastcall, a request held across a pod delete answered.
import { request } from "node:http";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../support/envoy.ts";
import type { KubeCluster } from "../support/kube.ts";
import { runCommand } from "../support/kube-process.ts";
import {
  type DemoCluster,
  demoClusterSkipReason,
  followLogs,
  startDemoCluster,
} from "../support/kube-workload.ts";
import { root } from "../support/paths.ts";

const skip = demoClusterSkipReason();

/** An app answering `port P` on both ports (after ?ms=N); on SIGTERM it finishes what it serves, then exits. */
const APP = [
  "const http = require('node:http'); let active = 0, stopping = false;",
  "const done = () => { if (stopping && active === 0) process.exit(0); };",
  "const servers = [8080, 9090].map((port) => http.createServer((req, res) => { active++;",
  "  const ms = Number(new URL(req.url, 'http://app').searchParams.get('ms') || 0);",
  "  res.on('close', () => { active--; done(); });",
  "  setTimeout(() => res.end(`port ${port}${ms ? ` after ${ms} ms` : ''}\\n`), ms); }).listen(port, '0.0.0.0'));",
  "process.on('SIGTERM', () => { stopping = true; for (const s of servers) { s.close(); s.closeIdleConnections(); } done(); });",
].join("\n");

/** What a user writes: the Deployment and its Service, nothing of lastcall's. */
const appYaml = (image: string) =>
  `apiVersion: apps/v1
kind: Deployment
metadata:
  name: shop
spec:
  replicas: 2
  selector:
    matchLabels:
      app: shop
  template:
    metadata:
      labels:
        app: shop
    spec:
      automountServiceAccountToken: false
      containers:
      - name: app
        image: ${image}
        imagePullPolicy: Never
        command: [node, -e, ${JSON.stringify(APP)}]
        ports:
        - name: http
          containerPort: 8080
        - containerPort: 9090
        readinessProbe:
          httpGet:
            path: /
            port: http
          periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata:
  name: shop
spec:
  selector:
    app: shop
  ports:
  - name: web
    port: 80
    targetPort: http
  - name: admin
    port: 9090
    targetPort: 9090
`;

/** GET through plain HTTP (no keep-alive), resolving with the status and body. */
function get(url: string): Promise<{ status: number; body: string }> {
  return new Promise((done, fail) => {
    request(url, { agent: false }, (res) => {
      let body = "";
      res.setEncoding("utf8").on("data", (chunk) => (body += chunk)).on(
        "end",
        () => done({ status: res.statusCode ?? 0, body }),
      );
    }).on("error", fail).end();
  });
}

if (skip) {
  it.skip(`real kubelet: ${skip}`, () => {});
} else {
  describe("inject's output applied alone on a real kubelet", () => {
    let cluster: KubeCluster;
    let built: DemoCluster["images"];

    beforeAll(async () => {
      ({ cluster, images: built } = await startDemoCluster({ configMaps: false }));
    }, 30 * 60_000);

    afterAll(async () => {
      await cluster?.stop();
    }, 120_000);

    /** Envoy's stats in a pod, read from its admin on the pod's loopback. */
    async function envoyStats(pod: string): Promise<Map<string, number>> {
      const script =
        "exec 3<>/dev/tcp/127.0.0.1/15000; printf 'GET /stats HTTP/1.1\\r\\nhost: admin\\r\\nconnection: close\\r\\n\\r\\n' >&3; cat <&3";
      const out = await cluster.kubectl([
        "exec",
        pod,
        "-c",
        "lastcall",
        "--",
        "bash",
        "-c",
        script,
      ]);
      if (!/\nserver\.live: /.test(out)) {
        throw new Error(`Envoy's admin in ${pod} answered:\n${out.slice(0, 2000)}`);
      }
      return new Map([...out.matchAll(/^([\w.]+): (\d+)$/gm)].map((m) => [m[1], Number(m[2])]));
    }

    it(
      "pods Ready, Service through Envoy (counted by the filter), a request held across kubectl delete pod answered",
      async () => {
        const injected = await runCommand(process.execPath, [
          join(root, "dist/lastcall.mjs"),
          "inject",
          "-f",
          "-",
          "--image",
          built.lastcall,
        ], { input: appYaml(built.node) });
        expect(injected.code, injected.stderr).toBe(0);
        const lines = injected.stderr.trim().split("\n");
        expect(lines).toEqual([
          "lastcall inject: deployment/shop: Envoy config in ConfigMap shop-lastcall-envoy (a new document after it): listeners 18080 → app port 8080, 19090 → app port 9090",
          `lastcall inject: deployment/shop: service/shop port 80 (web): targetPort http now names lastcall's listener 18080 (container "app" port 8080 is renamed http-app)`,
          `lastcall inject: deployment/shop: service/shop port 9090 (admin): targetPort 9090 → 19090 (lastcall's listener in front of container "app" port 9090)`,
          `lastcall inject: deployment/shop: container "app" readiness probe: port 8080 → 18080 (through Envoy, so the pod is Ready only while Envoy serves it; the sidecar has no readiness probe of its own)`,
        ]);
        await cluster.kubectl(["apply", "-f", "-"], injected.stdout);
        await cluster.kubectl(["rollout", "status", "deployment/shop", "--timeout=180s"]).catch(
          async (error) => {
            throw new Error(
              `${error.message}\n${await cluster.kubectl(["describe", "pods", "-l", "app=shop"])
                .catch(() => "")}`,
            );
          },
        );
        // The named targetPort follows its name to Envoy's port (a native sidecar's ports count).
        const slices = JSON.parse(
          await cluster.kubectl([
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=shop",
            "-o",
            "json",
          ]),
        );
        const ports = slices.items.flatMap((s: { ports?: { name: string; port: number }[] }) =>
          s.ports ?? []
        );
        expect(
          Object.fromEntries(ports.map((p: { name: string; port: number }) => [p.name, p.port])),
        ).toEqual({ web: 18080, admin: 19090 });

        const ip =
          (await cluster.kubectl(["get", "service", "shop", "-o", "jsonpath={.spec.clusterIP}"]))
            .trim();
        await waitFor(
          async () => ((await get(`http://${ip}/`).catch(() => ({ status: 0 }))).status === 200
            ? true
            : undefined),
          { timeoutMs: 30_000, intervalMs: 100, what: "the Service to answer" },
        );
        const pods = (await cluster.kubectl([
          "get",
          "pods",
          "-l",
          "app=shop",
          "-o",
          'jsonpath={range .items[*]}{.metadata.name} {.status.podIP}{"\\n"}{end}',
        ]))
          .trim().split("\n").map((l) => l.split(" "));
        expect(pods).toHaveLength(2);
        const before = await Promise.all(pods.map(([pod]) => envoyStats(pod)));
        for (let i = 0; i < 10; i++) {
          expect(await get(`http://${ip}:9090/`)).toEqual({ status: 200, body: "port 9090\n" });
        }
        const after = await Promise.all(pods.map(([pod]) => envoyStats(pod)));
        const total = (stats: Map<string, number>[]) =>
          stats.reduce((sum, s) => sum + (s.get("http.inbound_9090.downstream_rq_total") ?? 0), 0);
        const seen = JSON.stringify(
          after.map((s) => [...s].filter(([k]) => /inbound|wasmcustom/.test(k))),
        );
        expect(total(after) - total(before), seen).toBe(10);

        // A long request through the Service: the pod whose lastcall counts it is deleted.
        const held = get(`http://${ip}/slow?ms=6000`);
        const state = async (podIp: string) =>
          (await fetch(`http://${podIp}:15020/v1/state`)).json() as Promise<
            { inflight: number; filter: string }
          >;
        // The kubelet's readiness probes go through Envoy too, each for a few ms: the held
        // request is the one still counted three reads in a row.
        const holding = async (address: string) => {
          for (let read = 0; read < 3; read++) {
            if ((await state(address)).inflight < 1) return false;
          }
          return true;
        };
        const [pod] = await waitFor(async () => {
          for (const [name, address] of pods) {
            if (await holding(address)) return [name, address];
          }
          return undefined;
        }, { timeoutMs: 10_000, intervalMs: 50, what: "a lastcall counting the held request" });
        // Exactly the held request, once no probe is passing at the same moment.
        await waitFor(async () => {
          const stats = await envoyStats(pod);
          return stats.get("wasmcustom.lastcall_inflight") === 1 &&
              stats.get("http.inbound_8080.downstream_rq_active") === 1
            ? true
            : undefined;
        }, { timeoutMs: 10_000, intervalMs: 50, what: "Envoy and the filter counting 1" });
        const logs = followLogs(cluster, pod, "lastcall");
        await cluster.kubectl(["delete", "pod", pod, "--wait=false"]);
        expect(await held).toEqual({ status: 200, body: "port 8080 after 6000 ms\n" });
        await logs.ended;
        const events = logs.lines.flatMap(({ line }) => {
          try {
            return [JSON.parse(line) as { event: string; inflight_at_stop?: number }];
          } catch {
            return [];
          }
        });
        expect(
          events.find((e) => e.event === "terminated"),
          logs.lines.map((l) => l.line).join("\n"),
        ).toMatchObject({ inflight_at_stop: 0 });
      },
      10 * 60_000,
    );
  });
}
