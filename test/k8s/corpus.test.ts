// `lastcall inject` over manifests written here in the shapes real projects ship (test/k8s/corpus:
// plain Deployments, Services, Jobs and CronJobs, Contour's rendered install, Istio-injected pods
// old and new, Envoy Gateway's proxy, Helm output and an unrendered template, `kubectl get -o
// yaml` Lists, JSON, hostNetwork, every YAML 1.1 scalar form). For each file and mode, through the real CLI:
//   - the expected outcome: pods injected, pods refused with the line that says why, exit code;
//   - the Kubernetes API server (v1.34, strict fields, server-side dry run) accepts the output;
//   - nothing outside the added sidecar changed meaning, and every scalar kept its form;
//   - injecting the output again gives the same bytes.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAllDocuments, visit } from "yaml";
import { type KubeApi, kubeApiSkipReason, startKubeApi } from "../support/kube-api.ts";
import { runLastcall } from "../support/lastcall.ts";
import { tempDir } from "../support/temp.ts";
import { writeFileSync } from "node:fs";

const dir = join(import.meta.dirname, "corpus");
type Mode = "native" | "classic";

/** What inject does with a file: pods injected, the refusal and warning lines (patterns), the exit code. */
interface Outcome {
  injected: number;
  lines: RegExp[];
  code: number;
}

const clean = (injected: number): Outcome => ({ injected, lines: [], code: 0 });
const refused = (injected: number, ...lines: RegExp[]): Outcome => ({ injected, lines, code: 1 });
const both = (o: Outcome) => ({ native: o, classic: o });

const CORPUS: Record<string, { native: Outcome; classic: Outcome }> = {
  "plain-deployment.yaml": {
    native: clean(1),
    classic: { injected: 1, lines: [/deployment\/storefront: container "storefront" has no command: not wrapped/], code: 0 },
  },
  "jobs.yaml": {
    native: clean(2),
    classic: { injected: 2, lines: [/cronjob\/heartbeat: container "heartbeat" runs busybox:1\.28 \(musl, not glibc\).*not wrapped.*--mode native/], code: 0 },
  },
  "contour-render.yaml": {
    native: refused(2, /^daemonset\/envoy: already has Contour's shutdown-manager \(container "shutdown-manager"\).*put lastcall in its shutdown-manager container/),
    classic: refused(
      2,
      /job\/contour-certgen-v1-33-8: container "contour" runs ghcr\.io\/projectcontour\/contour:v1\.33\.8 \(Contour's image: a static binary on scratch\)/,
      /deployment\/contour: container "contour" runs ghcr\.io\/projectcontour\/contour:v1\.33\.8/,
      /^daemonset\/envoy: already has Contour's shutdown-manager/,
    ),
  },
  "istio-injected-sidecar.yaml": both(refused(0, /^deployment\/hello: already has Istio's sidecar \(container "istio-proxy"\).*remove Istio's injection first/)),
  "istio-injected-native.yaml": both(refused(0, /^deployment\/hello: already has Istio's sidecar \(container "istio-proxy"\)/)),
  "mesh-marked.yaml": both(refused(
    0,
    /^deployment\/reviews: already has Istio's injection \(sidecar\.istio\.io\/inject: true\)/,
    /^pod\/emoji: already has Linkerd's sidecar \(container "linkerd-proxy"\) and Linkerd's injection/,
  )),
  "envoy-gateway-proxy.yaml": both(refused(0, /already has Envoy Gateway's shutdown-manager \(container "shutdown-manager"\).*put lastcall in its shutdown-manager container/)),
  "helm-rendered.yaml": {
    native: clean(2),
    classic: {
      injected: 2,
      lines: [/deployment\/release-web: container "web" has no command/, /pod\/release-web-test-connection: container "wget" runs busybox/],
      code: 0,
    },
  },
  "host-network.yaml": both(refused(0, /^daemonset\/node-exporter: uses hostNetwork: .*--host-network to inject it anyway/)),
  "kubectl-list.yaml": both(clean(1)),
  "kubectl-create.json": both(clean(1)),
  "statefulset-forms.yaml": both({ injected: 1, lines: [/statefulset\/db: port 15020 is taken in this pod: lastcall's status server uses 15021/], code: 0 }),
  "distroless-app.yaml": {
    native: clean(1),
    classic: { injected: 1, lines: [/container "app" runs gcr\.io\/distroless\/static-debian12:nonroot \(distroless static: no libc\)/], code: 0 },
  },
};

/** Reads YAML as Kubernetes does (1.1: `0644` is octal); one value per document. */
const values = (text: string) => parseAllDocuments(text, { version: "1.1", merge: true }).map((d) => d.toJS({ maxAliasCount: -1 }));

/** Every one-line scalar as written: `0644`, `"yes"`, `0x3`, with how often it occurs. */
function scalarForms(text: string): Map<string, number> {
  const forms = new Map<string, number>();
  for (const doc of parseAllDocuments(text, { version: "1.1", merge: true })) {
    visit(doc, {
      Scalar(_, node) {
        if (!node.range) return;
        const form = text.slice(node.range[0], node.range[1]);
        if (!form.includes("\n")) forms.set(form, (forms.get(form) ?? 0) + 1);
      },
    });
  }
  return forms;
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);
const SPEC_PATHS: Record<string, string[]> = {
  Pod: ["spec"],
  CronJob: ["spec", "jobTemplate", "spec", "template", "spec"],
};
const ADDED_CONTAINERS = new Set(["lastcall", "lastcall-install"]);
const ADDED_VOLUMES = new Set(["lastcall-config", "lastcall-bin"]);

/** The objects of a document: itself, or a List's items. */
const objectsOf = (value: unknown): Obj[] => (isObj(value) && typeof value.kind === "string" && value.kind.endsWith("List") && Array.isArray(value.items) ? value.items.filter(isObj) : isObj(value) ? [value] : []);

/** The pod spec of an object, if it is a workload. */
function podSpecOf(object: Obj): Obj | undefined {
  const path = SPEC_PATHS[String(object.kind)] ?? ["spec", "template", "spec"];
  let at: unknown = object;
  for (const key of path) at = isObj(at) ? at[key] : undefined;
  return isObj(at) ? at : undefined;
}

/**
 * Takes out what inject adds (the sidecar, the install container, their volumes and mounts,
 * `lastcall exec` around app commands), so what is left can be compared with the input.
 */
function withoutSidecar(output: Obj, input: Obj): Obj {
  const copy = structuredClone(output);
  const inputs = objectsOf(input);
  objectsOf(copy).forEach((object, i) => {
    const spec = podSpecOf(object);
    const before = inputs[i] && podSpecOf(inputs[i]);
    if (!spec || !before) return;
    const drop = (key: string, keep: (item: Obj) => boolean, from: Obj = spec, was: Obj | undefined = before) => {
      if (!Array.isArray(from[key])) return;
      from[key] = (from[key] as Obj[]).filter(keep);
      if ((from[key] as unknown[]).length === 0 && !(was && key in was)) delete from[key];
    };
    drop("initContainers", (c) => !ADDED_CONTAINERS.has(String(c.name)));
    drop("containers", (c) => !ADDED_CONTAINERS.has(String(c.name)));
    drop("volumes", (v) => !ADDED_VOLUMES.has(String(v.name)));
    for (const [j, c] of ((spec.containers as Obj[] | undefined) ?? []).entries()) {
      const command = c.command as string[] | undefined;
      if (command?.[0] === "/lastcall/bin/lastcall" && command[1] === "exec") c.command = command.slice(command.indexOf("--") + 1);
      drop("volumeMounts", (m) => !ADDED_VOLUMES.has(String(m.name)), c, (before.containers as Obj[])[j]);
    }
  });
  return copy;
}

const skip = kubeApiSkipReason();

describe("inject over the corpus of real-shaped manifests", () => {
  let api: KubeApi | undefined;
  beforeAll(async () => {
    if (!skip) api = await startKubeApi();
  }, 120_000);
  afterAll(async () => {
    await api?.stop();
  });

  it("has an expected outcome for every file in test/k8s/corpus", () => {
    const files = readdirSync(dir).filter((f) => f !== "helm-template.yaml").sort();
    expect(files).toEqual(Object.keys(CORPUS).sort());
  });

  if (skip) it.skip(`corpus against the API server: ${skip}`, () => {});
  else {
    it("every input is valid to the API server to begin with", async () => {
      for (const file of Object.keys(CORPUS)) expect(await api!.validate(readFileSync(join(dir, file), "utf8")), file).toEqual([]);
    });
  }

  for (const [file, outcomes] of Object.entries(CORPUS)) {
    for (const mode of ["native", "classic"] as Mode[]) {
      it(`${file}, ${mode}: ${outcomes[mode].injected} injected, ${outcomes[mode].lines.length} lines, exit ${outcomes[mode].code}; valid, same meaning and forms, idempotent`, async () => {
        const expected = outcomes[mode];
        const path = join(dir, file);
        const input = readFileSync(path, "utf8");
        const once = await runLastcall(["inject", "-f", path, "--mode", mode]);
        const lines = once.stderr.split("\n").filter(Boolean).map((l) => l.replace(/^lastcall inject: /, ""));
        expect({ code: once.code, lines: lines.length }).toEqual({ code: expected.code, lines: expected.lines.length });
        expected.lines.forEach((pattern, i) => expect(lines[i]).toMatch(pattern));

        const json = file.endsWith(".json");
        const before = json ? [JSON.parse(input)] : values(input);
        const after = json ? [JSON.parse(once.stdout)] : values(once.stdout);
        // Nothing else changed meaning: the output without the sidecar is the input.
        expect(after.map((v, i) => withoutSidecar(v as Obj, before[i] as Obj))).toEqual(before);
        const sidecars = after.flatMap((v) => objectsOf(v)).map(podSpecOf).filter((spec) =>
          [...((spec?.initContainers as Obj[] | undefined) ?? []), ...((spec?.containers as Obj[] | undefined) ?? [])].some((c) => c.name === "lastcall")
        );
        expect(sidecars).toHaveLength(expected.injected);
        // Every scalar kept its form (octal modes, quotes, hex): the input's forms are all in the output.
        if (!json) {
          const out = scalarForms(once.stdout);
          const lost = [...scalarForms(input)].filter(([form, n]) => (out.get(form) ?? 0) < n).map(([form]) => form);
          expect(lost).toEqual([]);
        }
        // Idempotent: the output, injected again, is the same bytes.
        const again = await runLastcall(["inject", "-f", "-", "--mode", mode], once.stdout);
        expect(again.stdout).toBe(once.stdout);
        if (api) expect(await api.validate(once.stdout)).toEqual([]);
      });
    }
  }

  it("an unrendered Helm template is refused: one line naming the file, document and line, exit 2, nothing printed", async () => {
    const path = join(dir, "helm-template.yaml");
    const result = await runLastcall(["inject", "-f", path]);
    expect(result).toMatchObject({ code: 2, stdout: "" });
    expect(result.stderr.trim()).toBe(`lastcall: cannot read ${path}: document 1, line 5: an unrendered template ({{ … }}): render it first (helm template, kustomize build) and inject what it prints`);
  });

  it("--host-network injects a hostNetwork pod when asked", async () => {
    const result = await runLastcall(["inject", "-f", join(dir, "host-network.yaml"), "--host-network"]);
    expect(result.code).toBe(0);
    expect(result.stdout).toContain("name: lastcall\n");
    if (api) expect(await api.validate(result.stdout)).toEqual([]);
  });

  it("annotation lastcall/inject: \"false\" leaves a workload out, silently, exit 0", async () => {
    const text = readFileSync(join(dir, "plain-deployment.yaml"), "utf8").replace("  labels:\n    app: storefront\nspec:", "  labels:\n    app: storefront\n  annotations:\n    lastcall/inject: \"false\"\nspec:");
    const path = join(tempDir("corpus-"), "opted-out.yaml");
    writeFileSync(path, text);
    expect(await runLastcall(["inject", "-f", path])).toMatchObject({ code: 0, stdout: text, stderr: "" });
  });
});
