// `lastcall bootstrap` writes nothing, carries the filter inline, turns a status host name into an
// IP, and reads the config's YAML safely.
import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { FILTER_WASM } from "../support/envoy-bootstrap.ts";
import { inboundConfig, lastcallCommand, writeConfig } from "../support/lastcall.ts";
import { heldAcrossSigterm, serving, upstreamForFile } from "../support/serving.ts";
import type { Json } from "../support/json.ts";

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

const app = upstreamForFile();
const root = mkdtempSync(join(tmpdir(), "lastcall-bootstrap-cmd-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** Runs a command to its end. */
function exec(command: string, args: string[], env: Record<string, string> = {}): Promise<Result> {
  return new Promise((resolve) => {
    execFile(command, args, {
      timeout: 30_000,
      maxBuffer: 16 << 20,
      env: { ...process.env, ...env },
    }, (error, stdout, stderr) => {
      resolve({ code: error ? (error as { code?: number }).code ?? null : 0, stdout, stderr });
    });
  });
}

/** Runs `lastcall bootstrap <args>` with its own empty TMPDIR, and returns what it left there too. */
async function bootstrap(args: string[]): Promise<Result & { leftInTmp: string[] }> {
  const [command, ...prefix] = lastcallCommand();
  const tmp = mkdtempSync(join(root, "tmp-"));
  const result = await exec(command, [...prefix, "bootstrap", ...args], { TMPDIR: tmp });
  return { ...result, leftInTmp: readdirSync(tmp) };
}

/** Every `vm_config.code.local` of a printed bootstrap. */
function moduleSources(config: unknown): Array<Record<string, unknown>> {
  const found: Array<Record<string, unknown>> = [];
  JSON.parse(JSON.stringify(config), (key, value) => (key === "local" && found.push(value), value));
  return found;
}

/** The address of the `lastcall_agent` cluster of a printed bootstrap. */
function agentAddress(config: Json): string {
  const cluster = config.static_resources.clusters.find((c: { name: string }) =>
    c.name === "lastcall_agent"
  );
  return cluster.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address
    .address;
}

const config = writeConfig(inboundConfig({ upstreamPort: 9 }), root);

describe("lastcall bootstrap writes nothing and prints what Envoy accepts", () => {
  it("carries the filter module inline, leaves TMPDIR empty, and the real Envoy validates it", async () => {
    const result = await bootstrap(["--config", config]);
    expect(result).toMatchObject({ code: 0, stderr: "" });
    expect(result.leftInTmp).toEqual([]);
    const printed = JSON.parse(result.stdout);
    const sources = moduleSources(printed);
    expect(sources.length).toBeGreaterThan(0);
    for (const source of sources) {
      expect(Object.keys(source)).toEqual(["inline_bytes"]);
      // A wasm module: "\0asm".
      expect(Buffer.from(String(source.inline_bytes), "base64").subarray(0, 4)).toEqual(
        Buffer.from([0, 0x61, 0x73, 0x6d]),
      );
    }
    const file = join(root, "printed.json");
    writeFileSync(file, result.stdout);
    const validation = await exec(process.env.ENVOY_BIN!, [
      "--mode",
      "validate",
      "-c",
      file,
      "--disable-hot-restart",
      "-l",
      "error",
    ]);
    expect(validation.code, validation.stderr).toBe(0);
  });

  it("references --filter-wasm when given, and refuses one that is missing in one line", async () => {
    const result = await bootstrap(["--config", config, "--filter-wasm", FILTER_WASM]);
    expect(result.code).toBe(0);
    expect(moduleSources(JSON.parse(result.stdout)).every((s) => s.filename === FILTER_WASM)).toBe(
      true,
    );
    const missing = await bootstrap([
      "--config",
      config,
      "--filter-wasm",
      "/nonexistent/filter.wasm",
    ]);
    expect(missing).toMatchObject({
      code: 2,
      stdout: "",
      stderr: "lastcall: Filter module not found: /nonexistent/filter.wasm\n",
    });
  });

  it.each([
    { address: "localhost", ip: /^(127\.0\.0\.1|::1)$/ },
    { address: "0.0.0.0", ip: /^127\.0\.0\.1$/ },
    { address: "::", ip: /^::1$/ },
    { address: "127.0.0.2", ip: /^127\.0\.0\.2$/ },
  ])(
    "--status-address $address becomes an IP in the lastcall_agent cluster",
    async ({ address, ip }) => {
      const result = await bootstrap(["--config", config, "--status-address", address]);
      expect(result.code, result.stderr).toBe(0);
      expect(agentAddress(JSON.parse(result.stdout))).toMatch(ip);
    },
  );

  it("--holder-paths puts holder_paths in the filter's configuration; without it the key is absent", async () => {
    const configs = (stdout: string) => {
      const found: string[] = [];
      JSON.parse(
        stdout,
        (key, value) => (key === "configuration" && found.push(String(value?.value ?? "")), value),
      );
      return found.map((text) => JSON.parse(text) as Record<string, unknown>);
    };
    const plain = await bootstrap(["--config", config]);
    const asked = await bootstrap(["--config", config, "--holder-paths"]);
    expect([plain.code, asked.code]).toEqual([0, 0]);
    expect(configs(plain.stdout).length).toBeGreaterThan(0);
    expect(configs(plain.stdout).every((c) => !("holder_paths" in c))).toBe(true);
    expect(configs(asked.stdout).every((c) => c.holder_paths === true)).toBe(true);
  });

  it("a --status-address that does not resolve is one line, exit 2", async () => {
    const result = await bootstrap([
      "--config",
      config,
      "--status-address",
      "no-such-host.invalid",
    ]);
    expect(result).toMatchObject({ code: 2, stdout: "" });
    expect(result.stderr).toMatch(
      /^lastcall: Cannot resolve --status-address no-such-host\.invalid: \S+\n$/,
    );
  });
});

describe("the Envoy config's YAML", () => {
  it("honours << merge keys", async () => {
    const path = join(root, "merge.yaml");
    writeFileSync(
      path,
      `x-cluster: &cluster
  type: STATIC
  connect_timeout: 1s
static_resources:
  clusters:
  - <<: *cluster
    name: app
    load_assignment: {cluster_name: app, endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 9}}}}]}]}
`,
    );
    const result = await bootstrap(["--config", path, "--no-filter"]);
    expect(result.code, result.stderr).toBe(0);
    const app = JSON.parse(result.stdout).static_resources.clusters.find((c: { name: string }) =>
      c.name === "app"
    );
    expect(app).toMatchObject({ type: "STATIC", connect_timeout: "1s" });
    expect(app).not.toHaveProperty("<<");
  });

  it.each([["bootstrap"], ["run", "--admin-port", "0", "--status-port", "0"]])(
    "an alias bomb is one line, exit 2 (%s)",
    async (...command) => {
      const dir = join(root, `bomb-${command[0]}`);
      mkdirSync(dir);
      const path = join(dir, "bomb.yaml");
      let text = 'a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n';
      for (let i = 1; i < 10; i++) {
        text += `a${i}: &a${i} [${Array(9).fill(`*a${i - 1}`).join(", ")}]\n`;
      }
      writeFileSync(path, text);
      const [lc, ...prefix] = lastcallCommand();
      const result = await exec(lc, [...prefix, ...command, "--config", path]);
      expect(result).toMatchObject({ code: 2, stdout: "" });
      expect(result.stderr).toBe(
        `lastcall: Cannot read Envoy config ${path}: more than 100 alias expansions (an alias bomb?): refused\n`,
      );
    },
  );
});

describe("lastcall run --status-address localhost", () => {
  it("becomes ready, its filter reports, and a request held across SIGTERM gets its 200", async () => {
    const config = writeConfig(
      inboundConfig({ upstreamPort: app.port }),
      mkdtempSync(join(root, "run-")),
    );
    const { lc, port, status } = await serving(app.port, ["--status-address", "localhost"], {
      config,
    });
    await heldAcrossSigterm(app, lc, port, status);
    expect(await lc.exited).toEqual({ code: 0, signal: null });
  });
});
