// Docs that work when pasted: every Envoy config of the docs is accepted by Envoy and serves
// through the filter, and every lastcall command line uses real flags (those whose files are in
// the repository run as written).
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import {
  type CommandLine,
  lastcallCommandLines,
  where,
  yamlBlocks,
  yamlShape,
} from "../support/docs-blocks.ts";
import { FILTER_WASM, localCluster } from "../support/envoy-bootstrap.ts";
import { startEnvoy, stopAllEnvoys } from "../support/envoy.ts";
import { runLastcall } from "../support/lastcall.ts";
import { startUpstreamApp, type UpstreamApp } from "../support/upstream-app.ts";
import { root } from "../support/paths.ts";

const run = promisify(execFile);
type Obj = Record<string, unknown>;

let app: UpstreamApp;
beforeAll(async () => (app = await startUpstreamApp()));
afterAll(() => app.close());
afterEach(stopAllEnvoys);

const blocks = yamlBlocks();
const named = <T extends { file: string; line: number }>(list: T[]) =>
  list.map((b) => [`${b.file}:${b.line}`, b] as const);

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
