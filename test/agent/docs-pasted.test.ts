// Docs that work when pasted: every YAML block of the docs is recognised and does what the doc
// says, and every command line uses real flags.
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join, resolve } from "node:path";
import { promisify } from "node:util";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import YAML from "yaml";
import {
  blockKey,
  type CommandLine,
  docsKubernetesObjects,
  lastcallCommandLines,
  podOf,
  where,
  yamlBlocks,
  yamlShape,
} from "../support/docs-blocks.ts";
import { FILTER_WASM, localCluster, startEnvoy, stopAllEnvoys, waitFor } from "../support/envoy.ts";
import { startHook } from "../support/hook-command.ts";
import { lastcallCommand, runLastcall } from "../support/lastcall.ts";
import { createNetns, netnsSkipReason } from "../support/netns.ts";
import { startUpstreamApp, type UpstreamApp } from "../support/upstream-app.ts";

const root = resolve(import.meta.dirname, "../..");
const run = promisify(execFile);
type Obj = Record<string, unknown>;

let app: UpstreamApp;
beforeAll(async () => (app = await startUpstreamApp()));
afterAll(() => app.close());
afterEach(stopAllEnvoys);

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

describe("Envoy configs of the docs: accepted by Envoy as pasted (the filter's path put in for /path/to/dist/filter.wasm)", () => {
  const envoyBlocks = blocks.filter((b) => yamlShape(b).kind.startsWith("envoy-"));
  it("there are some", () => expect(envoyBlocks.length).toBeGreaterThanOrEqual(2));

  it.each(named(envoyBlocks))(
    "%s: envoy --mode validate (as it is, and as lastcall bootstrap makes it), then a running Envoy serves through it and its filter takes the configuration",
    async (_, block) => {
      const bootstrap = completeBootstrap(yamlShape(block));
      const dir = mkdtempSync(join(tmpdir(), "lastcall-docs-"));
      const file = join(dir, "envoy.json");
      writeFileSync(file, JSON.stringify(bootstrap));
      const validate = (path: string) =>
        run(process.env.ENVOY_BIN!, ["--mode", "validate", "-c", path, "-l", "warning"]).then(
          () => 0,
          (e) => `${e.code}: ${e.stderr}`,
        );
      expect(await validate(file), where(block)).toBe(0);
      // As filter.md says to give it to lastcall run: without the filter and the cluster lastcall adds itself; it puts one back.
      const own = withoutLastcall(bootstrap) as { static_resources: { clusters: Obj[] } };
      expect(filters(own)).toBe(0);
      writeFileSync(join(dir, "own.json"), JSON.stringify(own));
      const effective = await runLastcall(["bootstrap", "--config", join(dir, "own.json")]);
      expect(effective.code, effective.stderr).toBe(0);
      writeFileSync(join(dir, "effective.json"), effective.stdout);
      expect(
        await validate(join(dir, "effective.json")),
        `${where(block)} through lastcall bootstrap`,
      ).toBe(0);
      expect(filters(JSON.parse(effective.stdout))).toBe(filters(bootstrap));
      const envoy = await startEnvoy(bootstrap);
      const response = await fetch(`http://127.0.0.1:${envoy.port("docs")}/`);
      expect(response.status).toBe(200);
      await response.text();
      expect(envoy.output()).not.toMatch(
        /invalid plugin configuration|Failed to load Wasm|wasm log.*error/i,
      );
      if (yamlShape(block).kind === "envoy-http-filters") {
        expect(Object.keys(await envoy.stats("lastcall_"))).toContain(
          "wasmcustom.lastcall_streams_total",
        );
      }
    },
  );
});

/** A copy of `config` without lastcall's filters (`root_id: lastcall_inflight`) and its `lastcall_agent` cluster. */
function withoutLastcall(config: unknown): unknown {
  if (Array.isArray(config)) {
    const isLastcall = (item: unknown) => {
      const typed = (item as { typed_config?: { config?: Obj } } | null)?.typed_config;
      return typed?.config?.root_id === "lastcall_inflight" ||
        (item as Obj | null)?.name === "lastcall_agent";
    };
    return config.filter((item) => !isLastcall(item)).map(withoutLastcall);
  }
  if (typeof config !== "object" || config === null) return config;
  return Object.fromEntries(
    Object.entries(config).map(([key, value]) => [key, withoutLastcall(value)]),
  );
}

/** How many lastcall filters (`root_id: lastcall_inflight`) a config has. */
function filters(value: unknown): number {
  if (Array.isArray(value)) return value.reduce((sum: number, item) => sum + filters(item), 0);
  if (typeof value !== "object" || value === null) return 0;
  return ((value as Obj).root_id === "lastcall_inflight" ? 1 : 0) +
    Object.values(value).reduce((sum: number, item) => sum + filters(item), 0);
}

/** A block of Envoy config completed into a bootstrap: filters into a listener `docs` in front of the test's app. */
function completeBootstrap(shape: ReturnType<typeof yamlShape>): Obj {
  const withFilter = (value: unknown) =>
    JSON.parse(JSON.stringify(value).replaceAll("/path/to/dist/filter.wasm", FILTER_WASM));
  const clusters = [localCluster("app", app.port), localCluster("lastcall_agent", 9)];
  const listener = (filters: unknown[]) => ({
    name: "docs",
    address: { socket_address: { address: "127.0.0.1", port_value: 0 } },
    filter_chains: [{ filters }],
  });
  if (shape.kind === "envoy-bootstrap") return withFilter(shape.bootstrap);
  if (shape.kind === "envoy-network-filters") {
    return withFilter({ static_resources: { listeners: [listener(shape.filters)], clusters } });
  }
  if (shape.kind !== "envoy-http-filters") throw new Error(`not Envoy config: ${shape.kind}`);
  return withFilter({
    static_resources: {
      listeners: [listener([{
        name: "envoy.filters.network.http_connection_manager",
        typed_config: {
          "@type":
            "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
          stat_prefix: "docs",
          route_config: {
            virtual_hosts: [{
              name: "all",
              domains: ["*"],
              routes: [{ match: { prefix: "/" }, route: { cluster: "app" } }],
            }],
          },
          http_filters: shape.filters,
        },
      }])],
      clusters,
    },
  });
}

describe("lastcall command lines of the docs' shell blocks", () => {
  const lines = lastcallCommandLines();
  const named = (list: CommandLine[]) =>
    list.map((c) => [`${c.block.file}:${c.line}: lastcall ${c.argv.join(" ")}`, c] as const);
  const help = new Map<string, Promise<string>>();
  /** `lastcall PATH --help`, once per path. */
  const helpOf = (path: string[]) => {
    const key = path.join(" ");
    if (!help.has(key)) {
      help.set(
        key,
        runLastcall([...path, "--help"]).then((
          r,
        ) => (r.code === 0
          ? r.stdout
          : Promise.reject(new Error(`lastcall ${key} --help: exit ${r.code}: ${r.stderr}`)))
        ),
      );
    }
    return help.get(key)!;
  };
  /** The command (and subcommand) an argv names, and the flags it gives it (up to `--`). */
  async function parse(argv: string[]): Promise<{ path: string[]; flags: string[] }> {
    const path: string[] = [];
    let rest = argv;
    while (rest.length && !rest[0].startsWith("-")) {
      const commands = (await helpOf(path)).split(/\nCommands:\n/)[1] ?? "";
      if (!new RegExp(`^\\s+${rest[0]}\\b`, "m").test(commands)) break;
      path.push(rest[0]);
      rest = rest.slice(1);
    }
    const end = rest.indexOf("--");
    const flags = (end < 0 ? rest : rest.slice(0, end)).filter((w) => /^--?[a-zA-Z]/.test(w)).map((
      w,
    ) => w.split("=")[0]);
    return { path, flags };
  }

  it("there are some", () => expect(lines.length).toBeGreaterThanOrEqual(10));

  it.each(named(lines))(
    "%s: its command exists and its --help lists every flag",
    async (_, line) => {
      const { path, flags } = await parse(line.argv);
      if (line.argv.length && !line.argv[0].startsWith("-")) {
        expect(
          path.length,
          `lastcall has no command ${line.argv[0]}`,
        ).toBeGreaterThan(0);
      }
      const text = await helpOf(path);
      for (const flag of flags) {
        if (flag === "--help" || flag === "-h") continue;
        expect(text, `lastcall ${path.join(" ")} --help does not list ${flag}`).toMatch(
          new RegExp(`(^|[\\s,])${flag}([\\s,<\\[]|$)`, "m"),
        );
      }
    },
  );

  // Only local effects: inject, check and bootstrap of files the repository has; `>` compared, not written.
  const local = lines.filter((l) =>
    ["inject", "check", "bootstrap"].includes(l.argv[0]) && inputsExist(l)
  );
  it("some run here as written (their files are in the repository)", () =>
    expect(local.length).toBeGreaterThanOrEqual(3));
  it.each(named(local))("%s: runs as written", async (_, line) => {
    const input = line.stdin ? readFileSync(join(root, line.stdin), "utf8") : "";
    const result = await runLastcall(line.argv, input);
    expect(
      result.code === 0 || (line.argv[0] === "check" && result.code === 1),
      `exit ${result.code}: ${result.stderr}`,
    ).toBe(true);
    if (line.stdout && existsSync(join(root, line.stdout))) {
      expect(result.stdout).toBe(readFileSync(join(root, line.stdout), "utf8"));
    }
  });
});

/** Whether every file a command line reads (`-f`, `--filename`, `-c`, `--config`, `<`) is in the repository. */
function inputsExist(line: CommandLine): boolean {
  const files = line.argv.flatMap((
    w,
    i,
  ) => (["-f", "--filename", "-c", "--config"].includes(line.argv[i - 1] ?? "") ? [w] : []));
  if (line.stdin) files.push(line.stdin);
  return files.length > 0 &&
    files.every((f) => f === "-" ? Boolean(line.stdin) : existsSync(join(root, f)));
}
