// `inject` and `check` read YAML as Kubernetes (go-yaml) does: merge keys honoured, and a
// document that cannot be built (an alias bomb) refused in one line, exit 2.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import YAML from "yaml";
import { checkManifest } from "../../agent/k8s/check.ts";
import { injectManifest } from "../../agent/k8s/inject.ts";
import { readManifest } from "../../agent/k8s/manifest.ts";
import { SIDECAR_DEFAULTS } from "../../agent/k8s/sidecar.ts";
import type { Json } from "../support/json.ts";
import { runLastcall } from "../support/lastcall.ts";
import { KINDS, specOf, workload } from "./workloads.ts";

const lastcall = runLastcall;

/** The "billion laughs": nine levels of nine aliases, 9^9 strings once expanded. */
function aliasBomb(): string {
  let text =
    "apiVersion: v1\nkind: Pod\nmetadata: {name: laughs}\nspec:\n  containers: [{name: app, image: app}]\n";
  text += '  a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n';
  for (let i = 1; i < 10; i++) {
    text += `  a${i}: &a${i} [${Array(9).fill(`*a${i - 1}`).join(", ")}]\n`;
  }
  return text;
}

/** Every document of a manifest as plain objects, merge keys applied (as Kubernetes reads it). */
const objects = (text: string) =>
  YAML.parseAllDocuments(text, { merge: true }).map((d) => d.toJS());

describe("an alias bomb is one line, exit 2, at once", () => {
  it.each(["inject", "check"])("%s", async (command) => {
    const result = await lastcall([command, "-f", "-"], `kind: ConfigMap\n---\n${aliasBomb()}`);
    expect(result).toMatchObject({ code: 2, stdout: "" });
    expect(result.stderr).toBe(
      "lastcall: cannot read stdin: document 2, line 3: more than 100 alias expansions (an alias bomb?): refused\n",
    );
    expect(result.ms).toBeLessThan(5000);
  });

  it("a merge key on something that is not a mapping is one line, exit 2", async () => {
    const result = await lastcall(
      ["check", "-f", "-"],
      "kind: Pod\nmetadata: {name: x}\nspec:\n  <<: [1, 2]\n",
    );
    expect(result).toMatchObject({ code: 2, stdout: "" });
    expect(result.stderr.split("\n").filter(Boolean)).toHaveLength(1);
    expect(result.stderr).toMatch(
      /^lastcall: cannot read stdin: document 1, line 1: Merge sources must be maps/,
    );
  });
});

/** An Istio pod whose app container (30 s preStop sleep) is written through a merge key. */
const istioPod = (merged: boolean) => {
  const app = `name: web
        image: example/web:1
        lifecycle:
          preStop:
            exec:
              command: ["/bin/sh", "-c", "sleep 30"]`;
  return `apiVersion: apps/v1
kind: Deployment
${merged ? `x-app: &app\n  ${app.replace(/\n {8}/g, "\n  ")}\n` : ""}metadata:
  name: web
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
      annotations:
        sidecar.istio.io/status: '{"containers":["istio-proxy"]}'
    spec:
      terminationGracePeriodSeconds: 60
      containers:
      - ${merged ? "<<: *app" : app}
      - name: istio-proxy
        image: docker.io/istio/proxyv2:1.22.0
        args: [proxy, sidecar]
`;
};

describe("a pod written with << merge keys is read as Kubernetes reads it", () => {
  it("check flags the merged pod exactly as the plain one", async () => {
    const plain = await lastcall(["check", "-f", "-"], istioPod(false));
    expect(plain.code).toBe(1);
    expect(plain.stdout).toContain("preStop sleep 30s");
    expect(await lastcall(["check", "-f", "-"], istioPod(true))).toMatchObject({
      code: 1,
      stdout: plain.stdout,
      stderr: "",
    });
  });

  it.each(["native", "classic"])(
    "inject (--mode %s) injects the merged pod like the plain one",
    async (mode) => {
      const plainPod = `apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  containers:
  - name: web
    image: example/web:1
    command: [./server, --port, "8080"]
    ports: [{containerPort: 8080}]
`;
      const mergedPod = `apiVersion: v1
kind: Pod
x-app: &app
  image: example/web:1
  command: [./server, --port, "8080"]
metadata: {name: web}
spec:
  containers:
  - <<: *app
    name: web
    ports: [{containerPort: 8080}]
`;
      const plain = await lastcall(["inject", "-f", "-", "--mode", mode], plainPod);
      const merged = await lastcall(["inject", "-f", "-", "--mode", mode], mergedPod);
      expect(plain).toMatchObject({ code: 0 });
      expect(merged).toMatchObject({ code: 0, stderr: plain.stderr });
      expect(objects(merged.stdout)[0].spec).toEqual(objects(plain.stdout)[0].spec);
      // The anchored original is left as it was: only the pod's own copy is wrapped.
      expect(objects(merged.stdout)[0]["x-app"]).toEqual({
        image: "example/web:1",
        command: ["./server", "--port", "8080"],
      });
      // And inject of its own output changes nothing.
      expect((await lastcall(["inject", "-f", "-", "--mode", mode], merged.stdout)).stdout).toBe(
        merged.stdout,
      );
    },
  );
});

describe("property: a container written through an anchor is injected and checked as the plain one", () => {
  const field = {
    image: fc.constantFrom("example/app:1", "example/web:2"),
    command: fc.constantFrom(["./server"], ["/bin/app", "--serve"]),
    args: fc.constantFrom(["--port", "8080"], []),
    lifecycle: fc.integer({ min: 0, max: 90 }).map((s) => ({
      preStop: { exec: { command: ["/bin/sh", "-c", `sleep ${s}`] } },
    })),
  };
  const container = fc.record(field, { requiredKeys: ["image"] });
  /** Which fields come from the anchor, and whether the container is the alias itself. */
  const split = fc.record({
    fromAnchor: fc.subarray(["image", "command", "args", "lifecycle"]),
    wholeAlias: fc.boolean(),
  });

  it("for every kind, mode and split", () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...KINDS),
        container,
        split,
        fc.constantFrom("native", "classic"),
        fc.integer({ min: 10, max: 120 }),
        (kind, c, { fromAnchor, wholeAlias }, mode, grace) => {
          const app = { name: "app", ...c };
          const plain = workload(kind, { terminationGracePeriodSeconds: grace, containers: [app] });
          const base = wholeAlias
            ? app
            : Object.fromEntries(Object.entries(app).filter(([k]) => fromAnchor.includes(k)));
          const own = wholeAlias
            ? {}
            : Object.fromEntries(Object.entries(app).filter(([k]) => !fromAnchor.includes(k)));
          const merged = workload(kind, {
            terminationGracePeriodSeconds: grace,
            containers: [{ MERGE_HERE: 1, ...own }],
          });
          const text = `x-app: &app ${JSON.stringify(base)}\n${YAML.stringify(merged)}`
            .replace(/MERGE_HERE: 1\n(\s*)/, wholeAlias ? "REPLACED" : "<<: *app\n$1")
            .replace(/- REPLACED/, "- *app");
          const plainText = YAML.stringify(plain);
          const options = { ...SIDECAR_DEFAULTS, mode };
          expect(checkManifest(text)).toEqual(checkManifest(plainText));
          const injected = injectManifest(text, options);
          const expected = injectManifest(plainText, options);
          expect(injected.warnings).toEqual(expected.warnings);
          expect(specOf(objects(injected.text)[0])).toEqual(specOf(objects(expected.text)[0]));
          expect(objects(injected.text)[0]["x-app"]).toEqual(base);
        },
      ),
      { numRuns: 150 },
    );
  });
});

describe("plain scalars are read as go-yaml v2, Kubernetes' reader, reads them", () => {
  it.each([
    ["e1", "e1"],
    ["E10", "E10"],
    [".e1", ".e1"],
    ["+e5", "+e5"],
    ["1:20", "1:20"],
    ["1e3", 1000],
    ["-1.5e3", -1500],
    ["1_000.5", 1000.5],
    [".5", 0.5],
    ["-.5", -0.5],
    ["1.", 1],
    ["0644", 420],
    ["yes", true],
  ])("%s", (written, value) => {
    expect(readManifest(`x: ${written}\n`)[0].doc.toJS().x).toEqual(value);
  });

  it("a pod named e1 and a port named e4 are wired as strings", () => {
    const pod = workload("Pod", {
      containers: [{
        name: "app",
        image: "example/app:1",
        ports: [{ name: "PORT", containerPort: 8080 }],
        readinessProbe: { httpGet: { path: "/ready", port: "PORT" } },
      }],
    }, "NAME");
    const text = YAML.stringify(pod).replace("NAME", "e1").replace(/PORT/g, "e4");
    const result = injectManifest(text, SIDECAR_DEFAULTS);
    expect(result.injected).toBe(1);
    const spec = specOf(objects(result.text)[0]);
    const sidecar = spec.initContainers.find((c: Json) => c.name === "lastcall");
    expect(spec.containers[0].ports).toEqual([{ name: "e4-app", containerPort: 8080 }]);
    expect(sidecar.ports).toContainEqual({ name: "e4", containerPort: 18080 });
    expect(spec.containers[0].readinessProbe.httpGet.port).toBe(18080);
  });
});
