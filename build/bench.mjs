#!/usr/bin/env node
// `npm run bench [-- --quick] [-- --only name,name]`: what the benchmarks need, each benchmark in
// turn, then docs/benchmarks.md.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { setup } from "./setup.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const quick = process.argv.includes("--quick");
const onlyArg = process.argv.find((a) => a.startsWith("--only="))?.slice("--only=".length) ??
  (process.argv.includes("--only") ? process.argv[process.argv.indexOf("--only") + 1] : undefined);
const SCRIPTS = [
  "termination",
  "polling",
  "filter-load",
  "footprint",
  "filter-cost",
  "inflight-push",
  "rollout",
  "startup",
];
const only = onlyArg ? onlyArg.split(",") : SCRIPTS;
const began = Date.now();

/** Pinned versions of the incumbents' code. */
const CONTOUR_VERSION = "v1.33.8";
const GATEWAY_VERSION = "v1.9.1";
const anchors = join(root, ".cache/anchors");
const goEnv = {
  ...process.env,
  GOPATH: join(anchors, "gopath"),
  GOMODCACHE: join(anchors, "gomod"),
  GOCACHE: join(anchors, "gocache"),
  GOBIN: join(anchors, "bin"),
  GOFLAGS: "-modcacherw",
  GOTOOLCHAIN: "local",
};

function fail(message) {
  console.error(`bench: ${message}`);
  process.exit(1);
}

function run(command, args, what, options = {}) {
  const result = spawnSync(command, args, {
    cwd: root,
    encoding: "utf8",
    maxBuffer: 64 << 20,
    ...options,
  });
  if (result.status !== 0) {
    fail(
      `${what} failed (${command} ${args.join(" ")}):\n${result.stdout ?? ""}${
        result.stderr ?? result.error ?? ""
      }`,
    );
  }
  return result.stdout;
}

function has(command) {
  return spawnSync("sh", ["-c", `command -v ${command}`], { encoding: "utf8" }).status === 0;
}

function loadGenerators() {
  const missing = [["wrk", "wrk"], ["h2load", "nghttp2-client"]].filter(([command]) =>
    !has(command)
  );
  if (missing.length === 0) return;
  const packages = missing.map(([, pkg]) => pkg);
  if (process.getuid?.() !== 0 || !has("apt-get")) {
    fail(
      `missing load generators: ${missing.map(([c]) => c).join(", ")}; install Debian's ${
        packages.join(" ")
      } (apt-get install -y ${packages.join(" ")})`,
    );
  }
  console.error(`bench: installing ${packages.join(", ")} with apt-get`);
  const install = () =>
    spawnSync("apt-get", ["install", "-y", "--no-install-recommends", ...packages], {
      encoding: "utf8",
    });
  let result = install();
  if (result.status !== 0) {
    spawnSync("apt-get", ["update"], { encoding: "utf8" });
    result = install();
  }
  if (result.status !== 0) {
    fail(`apt-get install ${packages.join(" ")} failed:\n${result.stdout}${result.stderr}`);
  }
}

function buildAnchors() {
  if (!has("go")) {
    fail(
      "Go is needed to build the incumbents' code (Contour, Istio's pkg/envoy): install Go ≥ 1.26",
    );
  }
  const stamp = join(anchors, "bin/versions.json");
  const istioMod = readFileSync(join(root, "bench/anchors/istio-agent/go.mod"), "utf8");
  const want = JSON.stringify({
    contour: CONTOUR_VERSION,
    istio: /istio\.io\/istio (\S+)/.exec(istioMod)?.[1],
    main: readFileSync(join(root, "bench/anchors/istio-agent/main.go"), "utf8").length,
  });
  if (
    existsSync(stamp) && readFileSync(stamp, "utf8") === want &&
    existsSync(join(anchors, "bin/contour")) && existsSync(join(anchors, "bin/istio-agent"))
  ) return;
  mkdirSync(join(anchors, "bin"), { recursive: true });
  console.error(
    "bench: building the incumbents' code with Go into .cache/anchors/ (a few minutes the first time)",
  );
  run(
    "go",
    ["install", "-trimpath", `github.com/projectcontour/contour/cmd/contour@${CONTOUR_VERSION}`],
    "building Contour",
    { env: goEnv },
  );
  run(
    "go",
    ["build", "-trimpath", "-o", join(anchors, "bin/istio-agent"), "."],
    "building Istio's agent",
    { env: goEnv, cwd: join(root, "bench/anchors/istio-agent") },
  );
  writeFileSync(stamp, want);
}

/**
 * Envoy Gateway's binary (its `envoy shutdown-manager` / `envoy shutdown`), for the rollout
 * benchmark only: built like Contour's from the Go module proxy into .cache/anchors/bin. When it
 * cannot be built, the reason goes to bin/envoy-gateway.error and the benchmark leaves it out.
 */
function buildGateway() {
  const bin = join(anchors, "bin/envoy-gateway");
  const stamp = join(anchors, "bin/envoy-gateway.version");
  const error = join(anchors, "bin/envoy-gateway.error");
  if (existsSync(bin) && existsSync(stamp) && readFileSync(stamp, "utf8") === GATEWAY_VERSION) {
    return;
  }
  console.error(
    `bench: building Envoy Gateway ${GATEWAY_VERSION}'s cmd/envoy-gateway with Go into .cache/anchors/ (about 10 minutes the first time)`,
  );
  const result = spawnSync("go", [
    "install",
    "-trimpath",
    `github.com/envoyproxy/gateway/cmd/envoy-gateway@${GATEWAY_VERSION}`,
  ], { cwd: root, encoding: "utf8", env: goEnv, maxBuffer: 64 << 20 });
  if (result.status !== 0) {
    const why =
      `go install github.com/envoyproxy/gateway/cmd/envoy-gateway@${GATEWAY_VERSION} failed (exit ${result.status}): ${
        (result.stderr || String(result.error)).trim().split("\n").slice(-5).join(" | ")
      }`;
    writeFileSync(error, `${why}\n`);
    console.error(`bench: ${why}`);
    return;
  }
  rmSync(error, { force: true });
  writeFileSync(stamp, GATEWAY_VERSION);
}

/**
 * The filter as it was before the gauge counting contract (one process-wide counter in shared
 * data, a compare-and-swap per +1 and −1), built from git, for the before/after comparison.
 */
const beforeArg = process.argv.find((a) => a.startsWith("--before="))?.slice("--before=".length) ??
  (process.argv.includes("--before")
    ? process.argv[process.argv.indexOf("--before") + 1]
    : undefined);
if (beforeArg !== undefined && !/^[0-9a-f]{7,40}$/.test(beforeArg)) {
  console.error(
    `bench: --before must be a commit id (7 to 40 hex digits), not ${JSON.stringify(beforeArg)}`,
  );
  process.exit(2);
}
const FILTER_BEFORE_COMMIT = beforeArg ?? "ed4e6f7";

async function buildBenchAssets() {
  const out = join(root, "dist/bench");
  mkdirSync(out, { recursive: true });
  const asc = join(root, "node_modules/.bin/asc");
  const ascFlags = ["--use", "abort=abort_proc_exit", "-Oz", "--noAssert", "--runtime", "half"];
  run(
    asc,
    ["bench/noop/index.ts", "-b", join(out, "noop.wasm"), ...ascFlags],
    "building the no-op module",
  );
  run(asc, [
    "bench/filter-variants/no-request-headers.ts",
    "-b",
    join(out, "filter-no-request-headers.wasm"),
    ...ascFlags,
  ], "building the filter without proxy_on_request_headers");
  const before = join(out, "filter-before");
  rmSync(before, { recursive: true, force: true });
  mkdirSync(before, { recursive: true });
  const archive = spawnSync("git", ["archive", FILTER_BEFORE_COMMIT, "filter/assembly"], {
    cwd: root,
    maxBuffer: 64 << 20,
  });
  if (archive.status === 0) {
    spawnSync("tar", ["-x", "-C", before], { input: archive.stdout });
    run(asc, [
      join(before, "filter/assembly/index.ts"),
      "-b",
      join(out, "filter-before.wasm"),
      ...ascFlags,
    ], "building the filter before the gauge contract");
  } else {
    console.error(
      `bench: commit ${FILTER_BEFORE_COMMIT} not in this clone: the filter-before comparison is skipped`,
    );
    rmSync(join(out, "filter-before.wasm"), { force: true });
  }
  const { build } = await import("esbuild");
  await build({
    entryPoints: SCRIPTS.map((name) => join(root, `bench/${name}.ts`)).filter(existsSync),
    outdir: out,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    packages: "external",
    outExtension: { ".js": ".mjs" },
    logLevel: "warning",
    // The build scripts (build/*.mjs) stay modules of their own, imported from where they are:
    // bundled, their `import.meta.url` would be the bundle's, so they would look for .cache/
    // under dist/ and run their command-line part (build/deno.mjs would start a Deno REPL).
    plugins: [{
      name: "build-scripts-external",
      setup(b) {
        b.onResolve(
          { filter: /\/build\/[\w-]+\.mjs$/ },
          (args) => ({ path: resolve(args.resolveDir, args.path), external: true }),
        );
      },
    }],
  });
}

const { envoy } = await setup();
loadGenerators();
buildAnchors();
if (only.includes("rollout")) buildGateway();
await buildBenchAssets();
console.error(
  `bench: built in ${Math.round((Date.now() - began) / 1000)} s; running ${only.join(", ")}${
    quick ? " (--quick: numbers not for publishing)" : ""
  }`,
);

for (const name of SCRIPTS.filter((s) => only.includes(s))) {
  const started = Date.now();
  const result = spawnSync(process.execPath, [
    join(root, `dist/bench/${name}.mjs`),
    ...(quick ? ["--quick"] : []),
  ], {
    cwd: root,
    stdio: ["ignore", "inherit", "inherit"],
    env: {
      ...process.env,
      ENVOY_BIN: envoy,
      ...(beforeArg ? { LASTCALL_BENCH_BEFORE: beforeArg } : {}),
    },
  });
  // Exit 3: this machine cannot run it (the rollout benchmark without root or a built cluster): said, not fatal.
  if (result.status === 3) {
    console.error(`bench: ${name} cannot run here (see above); its results are not updated`);
    continue;
  }
  if (result.status !== 0) fail(`${name} failed (exit ${result.status ?? result.signal})`);
  // A benchmark that exits 0 without writing its results measured nothing: say so, loudly.
  const written = join(root, "bench/results", `${name}.json`);
  if (!existsSync(written) || statSync(written).mtimeMs < started) {
    fail(`${name} exited without writing ${relative(root, written)}`);
  }
  console.error(`bench: ${name} done in ${Math.round((Date.now() - started) / 1000)} s`);
}

run(process.execPath, [join(root, "bench/report.mjs")], "writing docs/benchmarks.md");
console.log(
  `bench: done in ${
    Math.round((Date.now() - began) / 1000)
  } s -> bench/results/*.json, docs/benchmarks.md`,
);
