// What the real-kubelet tests run: images imported into containerd, the injected demo app, API
// watches, termination timelines.
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync } from "node:fs";
import { request } from "node:https";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";
import { kubePaths } from "../../build/kube.mjs";
import { buildImages } from "../../build/image.mjs";
import { type KubeCluster, kubeClusterSkipReason, startKubeCluster } from "./kube.ts";
import { mustRun } from "./kube-process.ts";
import { waitFor } from "./envoy.ts";
import { containerToolsMissing, podman } from "./podman.ts";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

/**
 * Imports podman images (build/image.mjs) into the cluster's containerd; the archives are kept
 * in .cache/kube/images by repository and image id, so a second run only imports.
 *
 * @example
 * await importPodmanImages(cluster, [images.lastcall, images.node]);
 */
export async function importPodmanImages(cluster: KubeCluster, tags: string[]): Promise<void> {
  const dir = join(root, ".cache", "kube", "images");
  mkdirSync(dir, { recursive: true });
  for (const tag of tags) {
    const id = (await podman(["image", "inspect", "--format", "{{.Id}}", tag])).trim().slice(0, 16);
    // <repository>@<image id>.tar; the archive of an older build of the same repository goes.
    const repository = tag.slice(0, tag.lastIndexOf(":")).replace(/[^A-Za-z0-9._-]/g, "_");
    for (const name of readdirSync(dir)) {
      if (
        (name.startsWith(`${repository}@`) && !name.startsWith(`${repository}@${id}.`)) ||
        !name.includes("@")
      ) rmSync(join(dir, name), { force: true });
    }
    const archive = join(dir, `${repository}@${id}.tar`);
    if (!existsSync(archive)) {
      await podman(["save", "--quiet", "--format", "docker-archive", "-o", `${archive}.tmp`, tag]);
      renameSync(`${archive}.tmp`, archive);
    }
    await cluster.importImage(archive);
  }
}

/** Why the demo cluster cannot run here (the cluster's needs, then podman's for the images), or undefined. */
export function demoClusterSkipReason(): string | undefined {
  const images = containerToolsMissing();
  return kubeClusterSkipReason() ??
    (images
      ? `needs ${images.missing.join(", ")} for the images: install with \`${images.install}\``
      : undefined);
}

/** The test cluster with lastcall's and the node images in it and the demo app's ConfigMaps applied. */
export interface DemoCluster {
  cluster: KubeCluster;
  images: Awaited<ReturnType<typeof buildImages>>;
  /** ms per step: images_ms, cluster_start_ms (it waits for the machine's cluster lock), image_import_ms. */
  timings: Record<string, number>;
}

/**
 * What every real-kubelet test file starts with: the images (build/image.mjs), the cluster
 * (one per machine: this waits for the lock), the images imported (archives reused), the demo
 * app's ConfigMaps (unless `configMaps: false`: a test that applies only what a user would).
 *
 * @example
 * const { cluster, images } = await startDemoCluster();
 * await cluster.stop();
 */
export async function startDemoCluster(
  options: { configMaps?: boolean } = {},
): Promise<DemoCluster> {
  const timings: Record<string, number> = {};
  let t = Date.now();
  const images = await buildImages();
  timings.images_ms = Date.now() - t;
  t = Date.now();
  const cluster = await startKubeCluster();
  timings.cluster_start_ms = Date.now() - t;
  try {
    t = Date.now();
    await importPodmanImages(cluster, [images.lastcall, images.node]);
    timings.image_import_ms = Date.now() - t;
    if (options.configMaps !== false) await cluster.kubectl(["apply", "-f", "-"], demoConfigMaps());
  } catch (error) {
    await cluster.stop();
    throw error;
  }
  return { cluster, images, timings };
}

/** The demo app's ConfigMaps (its code and lastcall's Envoy config) from examples/k8s/pod-demo.yaml. */
export function demoConfigMaps(): string {
  const text = readFileSync(join(root, "examples/k8s/pod-demo.yaml"), "utf8");
  const docs = parseAllDocuments(text);
  return (Array.isArray(docs) ? docs : []).filter((d) =>
    (d.toJS() as { kind?: string } | null)?.kind === "ConfigMap"
  )
    .map((d) => `---\n${text.slice(d.range[0], d.range[2]).replace(/^---\n/, "")}`).join("");
}

/** Options of the demo workloads. */
export interface DemoOptions {
  /** The node image (build/image.mjs) the app runs in. */
  nodeImage: string;
  /** The app's preStop sleep, in seconds (0: none). @default 2 */
  preStopSeconds?: number;
  grace?: number;
}

/** The demo app as a Deployment (port 10000 through lastcall's Envoy) behind Service `demo`, before injection. */
export function demoDeployment(options: DemoOptions & { replicas: number }): string {
  const preStop = options.preStopSeconds ?? 2;
  return demoApp(options, {
    app: `readinessProbe: {httpGet: {path: /, port: 10000}, periodSeconds: 1}${
      preStop > 0
        ? `
        lifecycle:
          preStop:
            sleep: {seconds: ${preStop}}`
        : ""
    }`,
    targetPort: 10000,
  });
}

/**
 * The demo app as an app is usually written, before injection: it listens on 0.0.0.0:8080 and
 * declares that port, has no preStop (unless `preStopSeconds`, default 0), and Service `demo`
 * reaches it on port 8080 (inject points it at Envoy's listener).
 */
export function plainDeployment(options: DemoOptions & { replicas: number }): string {
  const preStop = options.preStopSeconds ?? 0;
  return demoApp(options, {
    app: `env: [{name: DEMO_APP_HOST, value: 0.0.0.0}]
        ports: [{name: http, containerPort: 8080}]
        readinessProbe: {httpGet: {path: /, port: http}, periodSeconds: 1}${
      preStop > 0
        ? `
        lifecycle:
          preStop:
            sleep: {seconds: ${preStop}}`
        : ""
    }`,
    targetPort: 8080,
  });
}

/** Deployment and Service `demo` around the demo app; `shape.app`: the app container's own lines. */
function demoApp(
  options: DemoOptions & { replicas: number },
  shape: { app: string; targetPort: number },
): string {
  return `apiVersion: apps/v1
kind: Deployment
metadata: {name: demo}
spec:
  replicas: ${options.replicas}
  selector: {matchLabels: {app: demo}}
  template:
    metadata: {labels: {app: demo}}
    spec:
      terminationGracePeriodSeconds: ${options.grace ?? 30}
      automountServiceAccountToken: false
      containers:
      - name: app
        image: ${options.nodeImage}
        imagePullPolicy: Never
        command: [node, /app/demo-app.mjs]
        ${shape.app}
        volumeMounts: [{name: demo-app, mountPath: /app, readOnly: true}]
      volumes:
      - name: demo-app
        configMap: {name: lastcall-demo-app}
---
apiVersion: v1
kind: Service
metadata: {name: demo}
spec:
  selector: {app: demo}
  ports: [{name: http, port: 80, targetPort: ${shape.targetPort}}]
`;
}

/**
 * A Job whose one container starts the demo app, asks it for /slow?ms=1000 through its own
 * sidecar's listener (127.0.0.1:10000), prints the answer and exits 0 on a 200.
 */
export function demoJob(options: DemoOptions): string {
  const script =
    "import('/app/demo-app.mjs').then(async (app) => { const r = await fetch('http://127.0.0.1:10000/slow?ms=1000');" +
    " console.log('job got', r.status, (await r.text()).trim()); app.default.close(); process.exit(r.status === 200 ? 0 : 1); })";
  return `apiVersion: batch/v1
kind: Job
metadata: {name: demo-job}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: ${options.grace ?? 30}
      automountServiceAccountToken: false
      containers:
      - name: job
        image: ${options.nodeImage}
        imagePullPolicy: Never
        command: [node, -e, ${JSON.stringify(script)}]
        volumeMounts: [{name: demo-app, mountPath: /app, readOnly: true}]
      volumes:
      - name: demo-app
        configMap: {name: lastcall-demo-app}
`;
}

/**
 * `lastcall inject` as a user runs it: the bundle (dist/lastcall.mjs), the manifest on stdin.
 *
 * @example
 * const injected = await inject(demoDeployment({ nodeImage, replicas: 2 }), ["--mode", "classic", "--image", tag]);
 */
export function inject(manifest: string, args: string[]): Promise<string> {
  return mustRun(
    process.execPath,
    [join(root, "dist/lastcall.mjs"), "inject", "-f", "-", ...args],
    { input: manifest },
  );
}

/** An object as the API sent it (JSON), read loosely by the timelines. */
// deno-lint-ignore no-explicit-any
export type ApiObject = Record<string, any>;

/** One event of a watch, with when the test received it (epoch ms). */
export interface Watched {
  at: number;
  type: string;
  object: ApiObject;
}

/**
 * Watches an API path (e.g. `/api/v1/namespaces/default/pods`) and keeps every event with its
 * receive time; `stop()` ends the watch.
 *
 * @example
 * const pods = watchApi(cluster, "/api/v1/namespaces/default/pods");
 * pods.stop();
 */
export function watchApi(cluster: KubeCluster, path: string): { events: Watched[]; stop(): void } {
  const events: Watched[] = [];
  const url = `${cluster.url}${path}${path.includes("?") ? "&" : "?"}watch=1`;
  const req = request(url, {
    rejectUnauthorized: false,
    headers: { authorization: `Bearer ${cluster.token}` },
  }, (res) => {
    res.on("error", () => {}); // ended by stop()
    const lines = createInterface({ input: res });
    lines.on("error", () => {}); // readline passes the response's "aborted" on
    lines.on("line", (line) => {
      if (!line.trim()) return;
      const { type, object } = JSON.parse(line);
      events.push({ at: Date.now(), type, object });
    });
  });
  req.on("error", () => {});
  req.end();
  return { events, stop: () => req.destroy() };
}

/** Streams `kubectl logs -f` of one container; lines with their receive time. */
export function followLogs(
  cluster: KubeCluster,
  pod: string,
  container: string,
  namespace = "default",
): { lines: Array<{ at: number; line: string }>; ended: Promise<void> } {
  const child = spawn(kubePaths().bin.kubectl, [
    `--kubeconfig=${cluster.kubeconfig}`,
    "-n",
    namespace,
    "logs",
    "-f",
    pod,
    "-c",
    container,
  ], { stdio: ["ignore", "pipe", "ignore"] });
  const lines: Array<{ at: number; line: string }> = [];
  createInterface({ input: child.stdout }).on(
    "line",
    (line) => lines.push({ at: Date.now(), line }),
  );
  return { lines, ended: new Promise((done) => child.once("close", () => done())) };
}

/** One row of a termination timeline, ms after the delete was seen. */
export interface TimelineRow {
  at_ms: number;
  who: string;
  what: string;
}

/** A kubelet log line (klog, -v=2) about `pod`, as a timeline row: "I1124 12:24:13.123456 … msg". */
export function kubeletRows(
  cluster: KubeCluster,
  pod: string,
  t0: number,
  namespace = "default",
): TimelineRow[] {
  const log = readFileSync(join(cluster.dir, "log", "kubelet.log"), "utf8");
  const year = new Date(t0).getFullYear();
  return log.split("\n").filter((l) =>
    l.includes(`pod="${namespace}/${pod}"`) &&
    /Killing container|hook|SyncTerminatingPod|exited|Pod has been deleted/i.test(l)
  ).map((l) => {
    const m = /^[IWE](\d\d)(\d\d) (\d\d:\d\d:\d\d\.\d{3})\d* +\d+ \S+\] "([^"]*)"(.*)$/.exec(l);
    if (!m) return undefined;
    const at = new Date(`${year}-${m[1]}-${m[2]}T${m[3]}`).getTime();
    const container = /containerName="([^"]+)"/.exec(m[5])?.[1];
    return {
      at_ms: at - t0,
      who: "kubelet (log)",
      what: `${m[4]}${container ? ` (${container})` : ""}`,
    };
  }).filter((r): r is TimelineRow => r !== undefined);
}

/** The kubelet's Events for `pod` (1 s resolution: lastTimestamp) as timeline rows. */
export async function eventRows(
  cluster: KubeCluster,
  pod: string,
  t0: number,
  namespace = "default",
): Promise<TimelineRow[]> {
  const events = JSON.parse(
    await cluster.kubectl([
      "get",
      "events",
      "-n",
      namespace,
      "-o",
      "json",
      "--field-selector",
      `involvedObject.name=${pod}`,
    ]),
  );
  return events.items.map((e: ApiObject) => ({
    at_ms: Date.parse(e.eventTime ?? e.lastTimestamp ?? e.firstTimestamp) - t0,
    who: `kubelet event (${e.source?.component ?? e.reportingComponent}, 1 s resolution)`,
    what: `${e.reason}${
      e.involvedObject?.fieldPath ? ` ${e.involvedObject.fieldPath}` : ""
    }: ${e.message}`,
  }));
}

/**
 * Deletes the demo Deployment and Service and waits (at most 90 s each) for its pods to be
 * gone, so the next test starts clean; never throws.
 *
 * @example
 * ```ts
 * await removeDemo(cluster);
 * ```
 */
export async function removeDemo(cluster: KubeCluster): Promise<void> {
  await cluster.kubectl([
    "delete",
    "deployment/demo",
    "service/demo",
    "--ignore-not-found",
    "--wait=true",
    "--timeout=90s",
  ]).catch(() => "");
  await waitFor(
    async () => ((await cluster.kubectl(["get", "pods", "-l", "app=demo", "-o", "name"]))
        .trim() === ""
      ? true
      : undefined),
    { timeoutMs: 90_000, intervalMs: 250, what: "demo pods gone" },
  ).catch(() => {});
}
