// Benchmark: a new pod's creation → Ready on the real kubelet, bare, with a do-nothing sidecar, and
// as `lastcall inject` prints it.
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";
import { quantile } from "./lib/stats.ts";
import {
  inject,
  plainDeployment,
  startDemoCluster,
  watchApi,
} from "../test/support/kube-workload.ts";
import { kubeClusterSkipReason } from "../test/support/kube.ts";
import type { Json } from "../test/support/json.ts";

const ROUNDS = Number(process.env.ROUNDS ?? 5);
// Two levels down from the clone, bundled (dist/bench) or not (bench/).
const results = join(resolve(dirname(fileURLToPath(import.meta.url)), "../.."), "bench", "results");

/** The Deployment's pod as a bare Pod named `name`, from a (maybe injected) manifest. */
function podOf(manifest: string, name: string): Record<string, unknown>[] {
  const objects = parseAllDocuments(manifest).map((d) => d.toJS());
  return objects.filter((o) => o?.kind !== "Service").map((o) => {
    if (o.kind !== "Deployment") return o;
    return {
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name, labels: { bench: "startup" } },
      spec: o.spec.template.spec,
    };
  });
}

/** Adds a native sidecar that only sleeps (no probes) to a pod spec. */
function withSleeper(objects: Json[]): Json[] {
  for (const o of objects.filter((o) => o.kind === "Pod")) {
    o.spec.initContainers = [{
      name: "sleeper",
      image: o.spec.containers[0].image,
      imagePullPolicy: "Never",
      restartPolicy: "Always",
      command: ["sleep", "infinity"],
    }];
  }
  return objects;
}

const skip = kubeClusterSkipReason();
if (skip) {
  console.error(`bench startup: cannot run here: real kubelet ${skip}`);
  process.exit(3);
}

const { cluster, images } = await startDemoCluster();
try {
  const plain = plainDeployment({ nodeImage: images.node, replicas: 1 });
  const variants: Record<string, (name: string) => Promise<Json[]>> = {
    bare: (name) => Promise.resolve(podOf(plain, name)),
    "native floor (sleep sidecar)": (name) => Promise.resolve(withSleeper(podOf(plain, name))),
    "lastcall native (default)": async (name) =>
      podOf(await inject(plain, ["--image", images.lastcall]), name),
    "lastcall classic (default)": async (name) =>
      podOf(await inject(plain, ["--image", images.lastcall, "--mode", "classic"]), name),
    // What the hold costs where it is kept (a config that carries the app's calls out).
    "lastcall native, held": async (name) =>
      podOf(await inject(plain, ["--image", images.lastcall, "--hold-app", "always"]), name),
    "lastcall classic, held": async (name) =>
      podOf(
        await inject(plain, [
          "--image",
          images.lastcall,
          "--mode",
          "classic",
          "--hold-app",
          "always",
        ]),
        name,
      ),
  };
  const ms: Record<string, number[]> = {};
  for (let round = 0; round < ROUNDS; round++) {
    for (const [variant, make] of Object.entries(variants)) {
      const name = `startup-${round}-${Object.keys(variants).indexOf(variant)}`;
      const objects = await make(name);
      const watch = watchApi(
        cluster,
        `/api/v1/namespaces/default/pods?fieldSelector=metadata.name%3D${name}`,
      );
      await cluster.kubectl(["apply", "-f", "-"], objects.map((o) => JSON.stringify(o)).join("\n"));
      await cluster.kubectl(["wait", "--for=condition=Ready", `pod/${name}`, "--timeout=120s"]);
      const added = watch.events.find((e) => e.type === "ADDED")!.at;
      const ready = watch.events.find((e) =>
        (e.object.status?.conditions ?? []).some((c: { type: string; status: string }) =>
          c.type === "Ready" && c.status === "True"
        )
      )!.at;
      watch.stop();
      (ms[variant] ??= []).push(ready - added);
      console.log(`${variant} round ${round + 1}: ${ready - added} ms`);
      await cluster.kubectl([
        "delete",
        "pod",
        name,
        "--wait=true",
        "--grace-period=1",
        "--timeout=60s",
      ]);
    }
  }
  const medians = Object.fromEntries(Object.entries(ms).map(([k, v]) => [k, quantile(v, 0.5)]));
  console.log(JSON.stringify({ medians, ms }, null, 2));
  mkdirSync(results, { recursive: true });
  writeFileSync(
    join(results, "startup.json"),
    `${
      JSON.stringify({ kubernetes: "v1.34.4", rounds: ROUNDS, medians_ms: medians, ms }, null, 2)
    }\n`,
  );
} finally {
  await cluster.stop();
}
