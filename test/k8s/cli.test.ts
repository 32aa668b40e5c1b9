// `lastcall inject`, `check` and `drain` through the built bundle: exit codes, stdout, stderr,
// standard input, and the examples in examples/k8s staying what the CLI generates.
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { constants, tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import YAML from "yaml";
import { injectManifest } from "../../agent/k8s/inject.ts";
import { SIDECAR_DEFAULTS } from "../../agent/k8s/sidecar.ts";
import { waitFor } from "../support/envoy.ts";
import { lastcallCommand, runLastcall } from "../support/lastcall.ts";
import { manifest, podSpec, workload } from "./workloads.ts";
import { root } from "../support/paths.ts";

/** `lastcall <args>` to its end: exit code and output (the time is not compared). */
async function lastcall(args: string[], input = "") {
  const { code, stdout, stderr } = await runLastcall(args, input);
  return { code, stdout, stderr };
}

const example = (name: string) => join(root, "examples/k8s", name);
const fixture = (name: string) => join(root, "test/k8s/fixtures", name);
const tempFile = (text: string) => {
  const path = join(mkdtempSync(join(tmpdir(), "lastcall-k8s-")), "manifest.yaml");
  writeFileSync(path, text);
  return path;
};

describe("lastcall inject", () => {
  const text = manifest(workload("Deployment"), workload("Job", podSpec(), "batch"));

  it("prints the manifest with the sidecar, from a file", async () => {
    const result = await lastcall(["inject", "-f", tempFile(text)]);
    const expected = injectManifest(text, SIDECAR_DEFAULTS);
    expect(expected.notes).toHaveLength(2);
    const stderr = [...expected.notes, ...expected.warnings].map((line) =>
      `lastcall inject: ${line}\n`
    ).join("");
    expect(result).toEqual({ code: 0, stdout: expected.text, stderr });
  });

  it("reads standard input with -f -, and its own output gives the same bytes", async () => {
    const once = await lastcall(["inject", "-f", "-", "--mode", "classic"], text);
    const twice = await lastcall(["inject", "--filename", "-", "--mode", "classic"], once.stdout);
    expect(once.code).toBe(0);
    expect(once.stdout).toBe(injectManifest(text, { ...SIDECAR_DEFAULTS, mode: "classic" }).text);
    expect(twice).toEqual({ code: 0, stdout: once.stdout, stderr: "" });
  });

  it("takes --image and --config-map", async () => {
    const result = await lastcall([
      "inject",
      "-f",
      "-",
      "--image",
      "registry.example/lastcall:2",
      "--config-map",
      "edge",
    ], text);
    expect(result.stdout).toContain("image: registry.example/lastcall:2");
    expect(result.stdout).toContain("name: edge");
  });

  it("warns on stderr, one line naming the container, about a Job app it cannot wrap", async () => {
    const job = manifest(
      workload(
        "Job",
        podSpec({
          containers: [{
            name: "report",
            image: "example/report:1",
            ports: [{ containerPort: 80 }],
          }],
        }),
        "nightly",
      ),
    );
    const result = await lastcall(["inject", "-f", "-", "--mode", "classic"], job);
    expect(result.code).toBe(0);
    expect(result.stderr).toBe(
      "lastcall inject: job/nightly: Envoy config in ConfigMap nightly-lastcall-envoy (a new document after it): listeners 10080 → app port 80\n" +
        'lastcall inject: job/nightly: container "report" has no command: not wrapped with lastcall exec, so the sidecar keeps running after it ends (set its command, or use --mode native)\n',
    );
  });

  it("a YAML error names the file, the document and the line, and exits 2", async () => {
    const path = tempFile(
      "kind: Pod\n---\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1: 2\n",
    );
    expect(await lastcall(["inject", "-f", path])).toEqual({
      code: 2,
      stdout: "",
      stderr:
        `lastcall: cannot read ${path}: document 2, line 7: Nested mappings are not allowed in compact mappings\n`,
    });
  });

  it("a missing file exits 2", async () => {
    expect(await lastcall(["inject", "-f", "/nonexistent/deploy.yaml"])).toEqual({
      code: 2,
      stdout: "",
      stderr:
        "lastcall: cannot read /nonexistent/deploy.yaml: ENOENT: no such file or directory, open '/nonexistent/deploy.yaml'\n",
    });
  });

  it("refuses an unknown --mode with exit 2", async () => {
    const result = await lastcall(["inject", "-f", "-", "--mode", "sidecar"]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("--mode");
    expect(result.stderr).toContain("'sidecar'");
  });

  it.each([
    ["--image", ""],
    ["--image", "lastcall :1"],
    ["--config-map", ""],
    ["--config-map", "Envoy_Config"],
    ["--config-map", `${"a".repeat(254)}`],
  ])("refuses %s %j with one line naming it, exit 2", async (flag, value) => {
    const result = await lastcall(["inject", "-f", "-", flag, value], "kind: Pod\n");
    expect(result).toMatchObject({ code: 2, stdout: "" });
    expect(result.stderr.trimEnd().split("\n")).toHaveLength(1);
    expect(result.stderr).toContain(`option '${flag} <`);
    expect(result.stderr).toContain(`argument '${value}' is invalid`);
  });
});

/** The note check prints for a workload without proxy. */
const noProxy = (ref: string) =>
  `${ref}: no proxy found: only the apps' preStop hooks against the grace period were checked\n`;

describe("lastcall check", () => {
  it("prints one line per finding, then the summary, and exits 1", async () => {
    const result = await lastcall(["check", "-f", fixture("istio-sidecar.yaml")]);
    expect(result).toEqual({
      code: 1,
      stdout:
        'deployment/web: istio-proxy terminationDrainDuration 5s (default) is shorter than the app\'s shutdown (preStop sleep 30s): the proxy stops while the app still calls out; set proxy.istio.io/config terminationDrainDuration ≥ 35s or run istio-proxy as a native sidecar (sidecar.istio.io/nativeSidecar: "true"; stops after the app) or use lastcall (waits for the app)\n' +
        "1 workload, 1 proxy, 1 finding\n",
      stderr: "",
    });
  });

  it("prints no finding, only its note and the summary, and exits 0 on a clean manifest, from standard input", async () => {
    expect(await lastcall(["check", "-f", "-"], readFileSync(example("deployment.yaml"), "utf8")))
      .toEqual({
        code: 0,
        stdout: `${noProxy("deployment/web")}1 workload, 0 proxies, 0 findings\n`,
        stderr: "",
      });
  });

  it("accepts inject's output: no finding, the proxy counted", async () => {
    const injected = await lastcall(["inject", "-f", example("deployment.yaml")]);
    expect(await lastcall(["check", "-f", "-"], injected.stdout)).toEqual({
      code: 0,
      stdout: "1 workload, 1 proxy, 0 findings\n",
      stderr: "",
    });
  });

  it("flags a Service that still reaches the app, as inject warns of it", async () => {
    const injected = await lastcall(["inject", "-f", example("deployment.yaml")]);
    const direct =
      "---\napiVersion: v1\nkind: Service\nmetadata: {name: web-direct}\nspec:\n  selector: {app: web}\n  ports: [{port: 8080}]\n";
    const line =
      `service/web-direct port 8080 targetPort 8080 reaches container "web" port 8080 directly (bypasses lastcall): its requests are not counted and not drained`;
    expect(await lastcall(["check", "-f", "-"], injected.stdout + direct)).toEqual({
      code: 1,
      stdout:
        `deployment/web: ${line}; set targetPort: 18080 (lastcall's listener for it)\n1 workload, 1 proxy, 1 finding\n`,
      stderr: "",
    });
    const again = await lastcall(["inject", "-f", "-"], injected.stdout + direct);
    expect(again).toEqual({
      code: 0,
      stdout: injected.stdout + direct,
      stderr:
        `lastcall inject: deployment/web: ${line}; set targetPort: 18080 (lastcall's listener for it)\n`,
    });
  });

  it("exits 2 on unreadable input", async () => {
    const result = await lastcall(["check", "-f", "-"], "a: [\n");
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/^lastcall: cannot read stdin: document 1, line \d+: /);
  });
});

describe("lastcall drain", () => {
  it("POSTs /drain?sidecar=native with its own start (asked_at) to the status server and exits 0", async () => {
    const requests: string[] = [];
    let arrived = 0;
    const server = createServer((req, res) => {
      arrived = Date.now();
      requests.push(`${req.method} ${req.url}`);
      res.setHeader("content-type", "application/json");
      res.end('{"draining":true}');
    });
    await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
    try {
      const port = (server.address() as { port: number }).port;
      const spawned = Date.now();
      expect(await lastcall(["drain", "--status-url", `http://127.0.0.1:${port}`])).toEqual({
        code: 0,
        stdout: "",
        stderr: "",
      });
      expect(requests).toHaveLength(1);
      const [, askedAt] = /^POST \/drain\?sidecar=native&asked_at=(\d+)$/.exec(requests[0]) ?? [];
      // The process's own start: after the test spawned it, before its request arrived.
      expect(Number(askedAt)).toBeGreaterThanOrEqual(spawned - 1);
      expect(Number(askedAt)).toBeLessThan(arrived);
    } finally {
      server.close();
    }
  });

  it("exits 1 with the reason when no agent answers", async () => {
    const closed = createServer();
    await new Promise<void>((done) => closed.listen(0, "127.0.0.1", done));
    const port = (closed.address() as { port: number }).port;
    await new Promise((done) => closed.close(done));
    expect(await lastcall(["drain", "--status-url", `http://127.0.0.1:${port}`])).toEqual({
      code: 1,
      stdout: "",
      stderr:
        `lastcall drain: cannot reach the agent at http://127.0.0.1:${port}/drain?sidecar=native: ECONNREFUSED\n`,
    });
  });
});

describe("examples/k8s are what the CLI generates", () => {
  it.each([
    { before: "deployment.yaml", after: "deployment.injected.yaml", args: [] },
    { before: "job.yaml", after: "job.injected.yaml", args: [] },
    { before: "job.yaml", after: "job.classic.yaml", args: ["--mode", "classic"] },
  ])("$after", async ({ before, after, args }) => {
    const result = await lastcall(["inject", "-f", example(before), ...args]);
    expect(result.code).toBe(0);
    expect(result.stdout).toBe(readFileSync(example(after), "utf8"));
  });

  it.each([
    {
      name: "deployment.yaml",
      stdout: `${noProxy("deployment/web")}1 workload, 0 proxies, 0 findings\n`,
    },
    { name: "deployment.injected.yaml", stdout: "1 workload, 1 proxy, 0 findings\n" },
    { name: "job.yaml", stdout: `${noProxy("job/reindex")}1 workload, 0 proxies, 0 findings\n` },
    { name: "job.injected.yaml", stdout: "1 workload, 1 proxy, 0 findings\n" },
    { name: "job.classic.yaml", stdout: "1 workload, 1 proxy, 0 findings\n" },
    {
      name: "envoy-config.yaml",
      stdout:
        "0 workloads, 0 proxies, 0 findings: nothing to check (no Pod, Deployment, StatefulSet, DaemonSet, Job or CronJob)\n",
    },
  ])("check finds nothing in $name", async ({ name, stdout }) => {
    expect(await lastcall(["check", "-f", example(name)])).toEqual({ code: 0, stdout, stderr: "" });
  });
});

describe("examples/k8s apply as they are on a cluster that has only them", () => {
  it.each([
    "deployment.injected.yaml",
    "job.injected.yaml",
    "job.classic.yaml",
    "caller.yaml",
    "pod-demo.yaml",
  ])("every ConfigMap a pod of %s mounts is in the file", (name) => {
    const docs = YAML.parseAllDocuments(readFileSync(example(name), "utf8")).map((d) => d.toJS());
    const defined = docs.filter((o) => o.kind === "ConfigMap").map((o) => o.metadata.name);
    const specs = docs.map((o) => (o.kind === "Pod" ? o.spec : o.spec?.template?.spec)).filter(
      Boolean,
    );
    const mounted = specs.flatMap((spec) =>
      (spec.volumes ?? []).filter((v: { configMap?: unknown }) => v.configMap).map((
        v: { configMap: { name: string } },
      ) => v.configMap.name)
    );
    expect(mounted.length).toBeGreaterThan(0);
    expect(mounted.filter((m: string) => !defined.includes(m))).toEqual([]);
  });
});

describe.each([
  { file: "envoy-config.yaml", configMap: "lastcall-envoy" },
  { file: "deployment.injected.yaml", configMap: "web-lastcall-envoy" },
])("examples/k8s/$file", ({ file, configMap }) => {
  it(`holds an envoy.yaml in ConfigMap ${configMap} that Envoy accepts, as lastcall runs it`, async () => {
    const object = YAML.parseAllDocuments(readFileSync(example(file), "utf8")).map((d) => d.toJS())
      .find((o) => o.kind === "ConfigMap" && o.metadata.name === configMap);
    const config = tempFile(object.data["envoy.yaml"]);
    const bootstrap = await lastcall(["bootstrap", "--config", config]);
    expect(bootstrap.code).toBe(0);
    const path = join(mkdtempSync(join(tmpdir(), "lastcall-k8s-")), "bootstrap.yaml");
    writeFileSync(path, bootstrap.stdout);
    const out = execFileSync(process.env.ENVOY_BIN!, [
      "--mode",
      "validate",
      "-c",
      path,
      "-l",
      "warning",
    ], { encoding: "utf8" });
    expect(out).toContain("OK");
  });
});

/** Resolves once process `pid` has a handler for `signal` (its SigCgt mask in /proc). */
async function catches(pid: number, signal: NodeJS.Signals): Promise<void> {
  const bit = 1n << BigInt(constants.signals[signal] - 1);
  await waitFor(() => {
    const mask = /^SigCgt:\s*([0-9a-f]+)$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return mask !== null && (BigInt(`0x${mask[1]}`) & bit) !== 0n ? true : undefined;
  }, { what: `pid ${pid} to handle ${signal}` });
}

describe("a stop signal while standard input is still open", () => {
  it.each(["inject", "check"])(
    "%s -f - stops at once, prints nothing, exits 143",
    async (command) => {
      const [bin, ...prefix] = lastcallCommand();
      const child = spawn(bin, [...prefix, command, "-f", "-"]);
      let out = "";
      child.stdout.setEncoding("utf8").on("data", (s: string) => (out += s));
      child.stderr.setEncoding("utf8").on("data", (s: string) => (out += s));
      const exited = new Promise((resolve) => child.on("close", resolve));
      child.stdin.write("apiVersion: v1\nkind: Pod\n");
      // Node itself catches SIGTERM from its start; SIGUSR2 is caught once lastcall's handlers are.
      await catches(child.pid!, "SIGUSR2");
      child.kill("SIGTERM");
      expect(await exited).toBe(143);
      expect(out).toBe("lastcall: stopped by SIGTERM\n");
      child.stdin.destroy();
    },
  );
});
