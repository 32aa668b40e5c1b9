// `lastcall inject` over manifests in the shapes real projects ship: outcome, API server
// acceptance, nothing else changed, idempotent. The comparisons are in corpus-support.ts.
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type KubeApi, kubeApiSkipReason, startKubeApi } from "../support/kube-api.ts";
import { runLastcall } from "../support/lastcall.ts";
import { root } from "../support/paths.ts";
import { tempDir } from "../support/temp.ts";
import {
  type Obj,
  objectsOf,
  podSpecOf,
  scalarForms,
  values,
  wiredForms,
  withoutSidecar,
  withoutWiring,
} from "./corpus-support.ts";

const dir = join(root, "test/k8s/corpus");
type Mode = "native" | "classic";

/** What inject does with a file: pods injected, the wiring, refusal and warning lines (patterns), the exit code. */
interface Outcome {
  injected: number;
  lines: RegExp[];
  code: number;
}

const clean = (injected: number, ...lines: RegExp[]): Outcome => ({ injected, lines, code: 0 });
const refused = (injected: number, ...lines: RegExp[]): Outcome => ({ injected, lines, code: 1 });
const both = (o: Outcome) => ({ native: o, classic: o });
/** The line of a pod inject cannot wire: it declares no port. */
const noPort = (ref: string) =>
  new RegExp(`^${ref}: no container declares a TCP containerPort.*--config-map NAME\\)$`);
/** The line of a pod whose app waits for Envoy at start: its --config-map is not in the manifest. */
const held = (ref: string, configMap: string) =>
  new RegExp(
    `^${ref}: the app waits for Envoy to be ready at start \\(ConfigMap ${configMap} is not in this manifest`,
  );
const wrote = (ref: string, configMap: string, listeners: string) =>
  new RegExp(
    `^${ref}: Envoy config in ConfigMap ${configMap} \\(a new document after it\\): listeners ${listeners}$`,
  );

const throughEnvoy = (ref: string, container: string, appPort: number, listener: number) =>
  new RegExp(
    `^${ref}: container "${container}" readiness probe: port ${appPort} → ${listener} \\(through Envoy, so the pod is Ready only while Envoy serves it; the sidecar has no readiness probe of its own\\)$`,
  );

/** Per file: the flags inject gets (default: none) and the outcome in each mode. */
const CORPUS: Record<string, { args?: string[]; native: Outcome; classic: Outcome }> = {
  "plain-deployment.yaml": {
    native: clean(
      1,
      wrote("deployment/storefront", "storefront-lastcall-envoy", "18080 → app port 8080"),
      /^deployment\/storefront: service\/storefront port 80: targetPort 8080 → 18080 /,
    ),
    classic: clean(
      1,
      wrote("deployment/storefront", "storefront-lastcall-envoy", "18080 → app port 8080"),
      /^deployment\/storefront: service\/storefront port 80: targetPort 8080 → 18080 /,
    ),
  },
  "service-wiring.yaml": (() => {
    const lines = [
      wrote(
        "deployment/checkout",
        "checkout-lastcall-envoy",
        "18080 → app port 8080, 19090 → app port 9090",
      ),
      /^deployment\/checkout: service\/checkout port 80 \(http\): targetPort http now names lastcall's listener 18080 \(container "checkout" port 8080 is renamed http-app\)$/,
      /^deployment\/checkout: service\/checkout port 9090 \(metrics\): targetPort 9090 → 19090 /,
      /^deployment\/checkout: service\/checkout-internal port 8080: targetPort 8080 → 18080 /,
    ];
    // Native only: there the sidecar starts first, so Envoy serves before the app's first probe.
    return {
      native: clean(1, ...lines, throughEnvoy("deployment/checkout", "checkout", 8080, 18080)),
      classic: clean(1, ...lines),
    };
  })(),
  // Jobs serve no port: their Envoy config (outbound listeners) is the user's, so their apps
  // wait for Envoy at start.
  "jobs.yaml": {
    args: ["--config-map", "batch-envoy"],
    native: clean(
      2,
      /^job\/report: Envoy config is your ConfigMap batch-envoy, not in this manifest/,
      held("job/report", "batch-envoy"),
      /^cronjob\/heartbeat: Envoy config is your ConfigMap batch-envoy/,
      held("cronjob/heartbeat", "batch-envoy"),
    ),
    classic: clean(
      2,
      /^job\/report: Envoy config is your ConfigMap batch-envoy/,
      held("job/report", "batch-envoy"),
      /^cronjob\/heartbeat: Envoy config is your ConfigMap batch-envoy/,
      held("cronjob/heartbeat", "batch-envoy"),
      /cronjob\/heartbeat: container "heartbeat" runs busybox:1\.28 \(musl, not glibc\).*not wrapped.*--mode native/,
    ),
  },
  "contour-render.yaml": {
    native: refused(
      1,
      wrote(
        "deployment/contour",
        "contour-lastcall-envoy",
        "18001 → app port 8001, 18000 → app port 8000, 16060 → app port 6060",
      ),
      noPort("job/contour-certgen-v1-33-8"),
      /^daemonset\/envoy: already has Contour's shutdown-manager \(container "shutdown-manager"\).*put lastcall in its shutdown-manager container/,
    ),
    classic: refused(
      1,
      wrote(
        "deployment/contour",
        "contour-lastcall-envoy",
        "18001 → app port 8001, 18000 → app port 8000, 16060 → app port 6060",
      ),
      noPort("job/contour-certgen-v1-33-8"),
      /^daemonset\/envoy: already has Contour's shutdown-manager/,
    ),
  },
  "istio-injected-sidecar.yaml": both(
    refused(
      0,
      /^deployment\/hello: already has Istio's sidecar \(container "istio-proxy"\).*remove Istio's injection first/,
    ),
  ),
  "istio-injected-native.yaml": both(
    refused(0, /^deployment\/hello: already has Istio's sidecar \(container "istio-proxy"\)/),
  ),
  "mesh-marked.yaml": both(refused(
    0,
    /^deployment\/reviews: already has Istio's injection \(sidecar\.istio\.io\/inject: true\)/,
    /^pod\/emoji: already has Linkerd's sidecar \(container "linkerd-proxy"\) and Linkerd's injection/,
  )),
  "envoy-gateway-proxy.yaml": both(
    refused(
      0,
      /already has Envoy Gateway's shutdown-manager \(container "shutdown-manager"\).*put lastcall in its shutdown-manager container/,
    ),
  ),
  "helm-rendered.yaml": {
    native: refused(
      1,
      wrote("deployment/release-web", "release-web-lastcall-envoy", "10080 → app port 80"),
      throughEnvoy("deployment/release-web", "web", 80, 10080),
      noPort("pod/release-web-test-connection"),
    ),
    classic: refused(
      1,
      wrote("deployment/release-web", "release-web-lastcall-envoy", "10080 → app port 80"),
      noPort("pod/release-web-test-connection"),
    ),
  },
  "host-network.yaml": both(
    refused(0, /^daemonset\/node-exporter: uses hostNetwork: .*--host-network to inject it anyway/),
  ),
  "kubectl-list.yaml": both(
    clean(
      1,
      wrote("deployment/web", "web-lastcall-envoy", "18080 → app port 8080"),
      /^deployment\/web: service\/web port 80: targetPort 8080 → 18080 /,
    ),
  ),
  // `kubectl create deployment` declares no port unless asked (--port).
  "kubectl-create.json": both(refused(0, noPort("deployment/api"))),
  "statefulset-forms.yaml": both(clean(
    1,
    wrote("statefulset/db", "db-lastcall-envoy", "15432 → app port 5432, 25020 → app port 15020"),
    /statefulset\/db: port 15020 is taken in this pod: lastcall's status server uses 15021/,
  )),
  "distroless-app.yaml": {
    args: ["--config-map", "static-app-envoy"],
    native: clean(
      1,
      /^deployment\/static-app: Envoy config is your ConfigMap static-app-envoy/,
      held("deployment/static-app", "static-app-envoy"),
    ),
    classic: clean(
      1,
      /^deployment\/static-app: Envoy config is your ConfigMap static-app-envoy/,
      held("deployment/static-app", "static-app-envoy"),
      /container "app" runs gcr\.io\/distroless\/static-debian12:nonroot \(distroless static: no libc\)/,
    ),
  },
};

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
      for (const file of Object.keys(CORPUS)) {
        expect(await api!.validate(readFileSync(join(dir, file), "utf8")), file).toEqual([]);
      }
    });
  }

  for (const [file, { args = [], ...outcomes }] of Object.entries(CORPUS)) {
    for (const mode of ["native", "classic"] as Mode[]) {
      it(`${file}, ${mode}: ${outcomes[mode].injected} injected, ${outcomes[mode].lines.length} lines, exit ${outcomes[mode].code}; valid, same meaning and forms, idempotent`, async () => {
        const expected = outcomes[mode];
        const path = join(dir, file);
        const input = readFileSync(path, "utf8");
        const once = await runLastcall(["inject", "-f", path, "--mode", mode, ...args]);
        const lines = once.stderr.split("\n").filter(Boolean).map((l) =>
          l.replace(/^lastcall inject: /, "")
        );
        expect({ code: once.code, lines: lines.length }).toEqual({
          code: expected.code,
          lines: expected.lines.length,
        });
        expected.lines.forEach((pattern, i) => expect(lines[i]).toMatch(pattern));

        const json = file.endsWith(".json");
        const before = json ? [JSON.parse(input)] : values(input);
        const after = json ? [JSON.parse(once.stdout)] : values(once.stdout);
        // Nothing else changed meaning: the output without the sidecar and its wiring is the input.
        expect(
          withoutWiring(after, before).map((v, i) => withoutSidecar(v as Obj, before[i] as Obj)),
        ).toEqual(before);
        const sidecars = after.flatMap((v) => objectsOf(v)).map(podSpecOf).filter((spec) =>
          [
            ...((spec?.initContainers as Obj[] | undefined) ?? []),
            ...((spec?.containers as Obj[] | undefined) ?? []),
          ].some((c) => c.name === "lastcall")
        );
        expect(sidecars).toHaveLength(expected.injected);
        // Every scalar kept its form (octal modes, quotes, hex): the input's forms are all in the output.
        // (Except the values the wiring moves: app ports' names and the targetPorts pointed at Envoy.)
        if (!json) {
          const out = scalarForms(once.stdout);
          const moved = wiredForms(after);
          const lost = [...scalarForms(input)].filter(([form, n]) =>
            (out.get(form) ?? 0) < n && !moved.has(form)
          ).map(([form]) => form);
          expect(lost).toEqual([]);
        }
        // Idempotent: the output, injected again, is the same bytes.
        const again = await runLastcall(
          ["inject", "-f", "-", "--mode", mode, ...args],
          once.stdout,
        );
        expect(again.stdout).toBe(once.stdout);
        if (api) expect(await api.validate(once.stdout)).toEqual([]);
      });
    }
  }

  it("an unrendered Helm template is refused: one line naming the file, document and line, exit 2, nothing printed", async () => {
    const path = join(dir, "helm-template.yaml");
    const result = await runLastcall(["inject", "-f", path]);
    expect(result).toMatchObject({ code: 2, stdout: "" });
    expect(result.stderr.trim()).toBe(
      `lastcall: cannot read ${path}: document 1, line 5: an unrendered template ({{ … }}): render it first (helm template, kustomize build) and inject what it prints`,
    );
  });

  it("--host-network injects a hostNetwork pod when asked", async () => {
    const result = await runLastcall([
      "inject",
      "-f",
      join(dir, "host-network.yaml"),
      "--host-network",
    ]);
    expect(result.code).toBe(0);
    expect(result.stdout).toContain("name: lastcall\n");
    if (api) expect(await api.validate(result.stdout)).toEqual([]);
  });

  it('annotation lastcall/inject: "false" leaves a workload out, silently, exit 0', async () => {
    const text = readFileSync(join(dir, "plain-deployment.yaml"), "utf8").replace(
      "  labels:\n    app: storefront\nspec:",
      '  labels:\n    app: storefront\n  annotations:\n    lastcall/inject: "false"\nspec:',
    );
    const path = join(tempDir("corpus-"), "opted-out.yaml");
    writeFileSync(path, text);
    expect(await runLastcall(["inject", "-f", path])).toMatchObject({
      code: 0,
      stdout: text,
      stderr: "",
    });
  });
});
