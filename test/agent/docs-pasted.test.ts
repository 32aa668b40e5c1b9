// Docs that work when pasted: every YAML block of the docs is recognised, and every Kubernetes
// block does what the doc says. Envoy configs and command lines: docs-commands.test.ts.
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { describe, expect, it } from "vitest";
import YAML from "yaml";
import {
  blockKey,
  docsKubernetesObjects,
  podOf,
  where,
  yamlBlocks,
  yamlShape,
} from "../support/docs-blocks.ts";
import { waitFor } from "../support/envoy.ts";
import { startHook } from "../support/hook-command.ts";
import { lastcallCommand, runLastcall } from "../support/lastcall.ts";
import { createNetns, netnsSkipReason } from "../support/netns.ts";
import { root } from "../support/paths.ts";

type Obj = Record<string, unknown>;

/** What the docs say of each Kubernetes block, by `blockKey`: a new block needs its line here. */
const EXPECTED: Record<
  string,
  { check?: 0 | 1; injectClassic?: "Deployment" | "Job"; injectArgs?: string[] }
> = {
  // "Kubernetes: sidecar": a lastcall sidecar with the pod's grace period given to --grace.
  "docs/operations.md: containers:": { check: 0 },
  // "Envoy Gateway": EG's own configuration, no workload in it.
  "docs/migration.md: apiVersion: gateway.envoyproxy.io/v1alpha1": { check: 0 },
  // "Classic": what inject writes for an app container of a Deployment (`# was [...]`).
  // A long-running app is wrapped only where it is held at start (the text says so).
  "docs/kubernetes.md: command: [/lastcall/bin/lastcall, exec, --no-quit, --, /app/server]": {
    injectClassic: "Deployment",
    injectArgs: ["--hold-app", "always"],
  },
  // "Jobs in classic mode": what inject writes for a Job's app container, args unchanged.
  "docs/kubernetes.md: command: [/lastcall/bin/lastcall, exec, --, python, -m, reindex]": {
    injectClassic: "Job",
  },
};

const blocks = yamlBlocks();
const named = <T extends { file: string; line: number }>(list: T[]) =>
  list.map((b) => [`${b.file}:${b.line}`, b] as const);

describe("every ```yaml block of the docs", () => {
  it("there are some (README.md, docs/*.md)", () => {
    expect(blocks.length).toBeGreaterThanOrEqual(5);
  });

  it.each(named(blocks))(
    "%s parses and is recognised (Kubernetes objects with apiVersion and kind)",
    (_, block) => {
      const shape = yamlShape(block);
      if (shape.kind === "kubernetes" || shape.kind === "pod-spec" || shape.kind === "container") {
        expect(
          EXPECTED[blockKey(block)],
          `no expectation for ${where(block)} ("${
            blockKey(block)
          }"): add what the doc says of it to EXPECTED`,
        ).toBeDefined();
      }
    },
  );

  it("the hook for the API server's validation lists every Kubernetes object, fragments completed into Pods", () => {
    const objects = docsKubernetesObjects();
    expect(new Set(objects.map((o) => blockKey(o.block)))).toEqual(new Set(Object.keys(EXPECTED)));
    for (const { object } of objects) {
      expect(object).toMatchObject({ apiVersion: expect.any(String), kind: expect.any(String) });
    }
    expect(objects.filter((o) => !o.whole).map((o) => (o.object as { kind: string }).kind)).toEqual(
      ["Pod", "Pod", "Pod"],
    );
  });
});

describe("Kubernetes blocks: lastcall check and inject say what the docs say", () => {
  const kube = blocks.filter((b) => ["kubernetes", "pod-spec"].includes(yamlShape(b).kind));
  it.each(named(kube))("%s: lastcall check", async (_, block) => {
    const shape = yamlShape(block);
    const objects = shape.kind === "kubernetes"
      ? shape.objects
      : shape.kind === "pod-spec"
      ? [podOf(block, shape.spec)]
      : [];
    const result = await runLastcall(
      ["check", "-f", "-"],
      objects.map((o) => YAML.stringify(o)).join("---\n"),
    );
    expect(result.code, `${where(block)}:\n${result.stdout}${result.stderr}`).toBe(
      EXPECTED[blockKey(block)]?.check,
    );
  });

  it.each(named(kube.filter((b) => yamlShape(b).kind === "pod-spec")))(
    "%s: a lastcall sidecar's --grace is the pod's grace period",
    (_, block) => {
      const shape = yamlShape(block) as { spec: Obj };
      const grace = shape.spec.terminationGracePeriodSeconds as number;
      for (const container of lastcallSidecars(shape.spec)) {
        const args = container.args as string[];
        expect(args[args.indexOf("--grace") + 1]).toBe(`${grace}s`);
      }
    },
  );

  const containers = blocks.filter((b) => yamlShape(b).kind === "container");
  it.each(named(containers))(
    "%s: is what lastcall inject --mode classic writes for the command it says it was",
    async (_, block) => {
      const { container } = yamlShape(block) as { container: Obj };
      const was = /#\s*was\s*(\[.*\])/.exec(block.text)?.[1];
      expect(was, `${where(block)} says what the command was: "# was [...]"`).toBeDefined();
      // A declared port, so inject can write the pod's Envoy config (a pod without one is refused).
      const original = {
        name: "app",
        image: "app:1",
        command: YAML.parse(was!),
        ...(container.args ? { args: container.args } : {}),
        ports: [{ containerPort: 8080 }],
      };
      const kind = EXPECTED[blockKey(block)]!.injectClassic!;
      const args = EXPECTED[blockKey(block)]!.injectArgs ?? [];
      const template = {
        metadata: { labels: { app: "docs" } },
        spec: { ...(kind === "Job" ? { restartPolicy: "Never" } : {}), containers: [original] },
      };
      const workload = kind === "Job"
        ? { apiVersion: "batch/v1", kind, metadata: { name: "docs" }, spec: { template } }
        : {
          apiVersion: "apps/v1",
          kind,
          metadata: { name: "docs" },
          spec: { selector: { matchLabels: { app: "docs" } }, template },
        };
      const result = await runLastcall(
        ["inject", "--mode", "classic", ...args, "-f", "-"],
        YAML.stringify(workload),
      );
      expect(result.code, result.stderr).toBe(0);
      // The workload, then the ConfigMap inject wrote for it.
      const injected = YAML.parseAllDocuments(result.stdout)[0].toJS() as {
        spec: { template: { spec: { containers: Obj[] } } };
      };
      const appContainer = injected.spec.template.spec.containers.find((c) => c.name === "app")!;
      expect(appContainer.command).toEqual(container.command);
      if (container.args) expect(appContainer.args).toEqual(container.args);
      // And the pod's lastcall-install copies the binary to where the command runs it from.
      expect(YAML.stringify(injected)).toContain(
        String((container.command as string[])[0]).replace(/\/lastcall$/, ""),
      );
    },
  );
});

/** The lastcall containers of a pod spec that run `lastcall run` (the image's entrypoint is lastcall). */
function lastcallSidecars(spec: Obj): Obj[] {
  return [...(spec.initContainers as Obj[] ?? []), ...(spec.containers as Obj[] ?? [])]
    .filter((c) =>
      /(^|\/)lastcall[:@]/.test(String(c.image)) &&
      (c.args as string[] | undefined)?.[0] === "run" && !c.command
    );
}

/** The pod's mounts, as files of a test folder: the config from examples/k8s/envoy-config.yaml, other watched files empty. */
function mountedArgs(args: string[], dir: string): string[] {
  const configMap = YAML.parse(
    readFileSync(join(root, "examples/k8s/envoy-config.yaml"), "utf8"),
  ) as { data: Record<string, string> };
  const mapped = new Map<string, string>();
  const mount = (path: string) => {
    if (!mapped.has(path)) {
      const file = join(dir, `${mapped.size}-${basename(path)}`);
      writeFileSync(file, configMap.data[basename(path)] ?? "");
      mapped.set(path, file);
    }
    return mapped.get(path)!;
  };
  return args.map((
    arg,
    i,
  ) => (i > 0 && ["--config", "-c", "--watch"].includes(args[i - 1]) && arg.startsWith("/")
    ? mount(arg)
    : arg)
  );
}

/** What the kubelet gets from `probe` on the pod's IP, from outside the pod as the kubelet asks: the status, or the error's code. */
async function kubeletProbe(podIp: string, probe: Obj): Promise<number | string> {
  const get = probe.httpGet as { path: string; port: number };
  try {
    const response = await fetch(`http://${podIp}:${get.port}${get.path}`, {
      signal: AbortSignal.timeout(1000),
    });
    await response.text();
    return response.status;
  } catch (error) {
    return (error as { cause?: { code?: string } }).cause?.code ?? (error as Error).name;
  }
}

const noNetns = netnsSkipReason();
describe.skipIf(noNetns)(
  noNetns
    ? `a lastcall sidecar of the docs, run as its pod runs it: ${noNetns}`
    : "a lastcall sidecar of the docs, run as its pod runs it",
  () => {
    const podSpecs = blocks.flatMap((block) => {
      const shape = yamlShape(block);
      const specs = shape.kind === "pod-spec"
        ? [shape.spec]
        : shape.kind === "kubernetes"
        ? shape.objects.flatMap(podSpecsOf)
        : [];
      return specs.flatMap((spec) =>
        lastcallSidecars(spec).map((container) =>
          [`${where(block)} ${container.name}`, container] as const
        )
      );
    });

    it("the docs have one", () => expect(podSpecs.length).toBeGreaterThanOrEqual(1));

    it.each(podSpecs)(
      "%s: the kubelet's readiness probe passes on the pod's IP, postStart's lastcall wait exits 0, SIGTERM ends it",
      async (_, container) => {
        const ns = createNetns();
        const { podIp } = ns.podLink();
        // The container's command line as the pod runs it (the image's entrypoint is lastcall), in the pod's network namespace.
        const pod = startHook([
          "netns",
          "exec",
          ns.name,
          ...lastcallCommand(),
          ...mountedArgs(container.args as string[], mkdtempSync(join(tmpdir(), "lastcall-docs-"))),
        ], { executable: "ip" });
        await pod.event("ready");
        const readiness = container.readinessProbe as Obj;
        expect(readiness, "the sidecar has a readiness probe").toBeDefined();
        await waitFor(
          async () => ((await kubeletProbe(podIp, readiness)) === 200 ? true : undefined),
          { what: "the readiness probe on the pod's IP", timeoutMs: 10_000 },
        );
        const postStart =
          ((container.lifecycle as Obj)?.postStart as { exec?: { command: string[] } })?.exec
            ?.command;
        if (postStart) {
          expect(postStart[0]).toBe("lastcall");
          const hook = await ns.run(lastcallCommand()[0], [
            ...lastcallCommand().slice(1),
            ...postStart.slice(1),
          ]);
          expect(hook).toMatchObject({ code: 0, stderr: "" });
        }
        pod.child.kill("SIGTERM");
        expect(await pod.event("terminated")).toMatchObject({ inflight_at_stop: 0 });
        expect(await pod.exited).toEqual({ code: 0, signal: null });
      },
    );

    it.each(podSpecs)(
      "%s, control: without --status-address 0.0.0.0 (the block as it was before) the probe on the pod's IP is refused",
      async (_, container) => {
        const ns = createNetns();
        const { podIp } = ns.podLink();
        const args = [...(container.args as string[])];
        const at = args.indexOf("--status-address");
        if (at >= 0) args.splice(at, 2);
        const pod = startHook([
          "netns",
          "exec",
          ns.name,
          ...lastcallCommand(),
          ...mountedArgs(args, mkdtempSync(join(tmpdir(), "lastcall-docs-"))),
        ], { executable: "ip" });
        await pod.event("ready");
        const loopback = await ns.run("curl", [
          "-s",
          "-o",
          "/dev/null",
          "-w",
          "%{http_code}",
          "http://127.0.0.1:15020/healthz/ready",
        ]);
        expect(loopback.stdout).toBe("200");
        expect(await kubeletProbe(podIp, container.readinessProbe as Obj)).toBe("ECONNREFUSED");
        pod.child.kill("SIGTERM");
        await pod.exited;
      },
    );
  },
);

/** The pod specs of a Kubernetes object: a Pod's, a workload's template's, a CronJob's. */
function podSpecsOf(object: Obj): Obj[] {
  const spec = object.spec as Obj | undefined;
  if (!spec) return [];
  if (object.kind === "Pod") return [spec];
  const template = (spec.template as Obj | undefined) ??
    ((spec.jobTemplate as Obj | undefined)?.spec as Obj | undefined)?.template as Obj | undefined;
  return template?.spec ? [template.spec as Obj] : [];
}
