#!/usr/bin/env node
// Bundles the agent with esbuild into dist/lastcall.mjs (and dist/xds-proxy.cjs), then the single
// executable dist/lastcall (build/sea-main.cjs, the CommonJS bundle and V8's code cache of a start).
import { spawnSync } from "node:child_process";
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const dist = join(root, "dist");
mkdirSync(dist, { recursive: true });
const wasm = join(dist, "filter.wasm");
if (!existsSync(wasm)) {
  console.error("lastcall build: dist/filter.wasm is missing: run npm run build:filter first");
  process.exit(1);
}

// The xDS proxy (with gRPC, a megabyte of code) is a bundle of its own, loaded on first use:
// agent/xds/load-proxy.ts becomes build/load-xds-proxy.mjs in the agent's bundle.
await build({
  entryPoints: [join(root, "agent/xds/proxy.ts")],
  bundle: true,
  platform: "node",
  target: "node20",
  logLevel: "warning",
  legalComments: "none",
  format: "cjs",
  outfile: join(dist, "xds-proxy.cjs"),
});
const splitXdsProxy = {
  name: "split-xds-proxy",
  setup(b) {
    b.onResolve(
      { filter: /\/load-proxy\.ts$/ },
      () => ({ path: join(root, "build/load-xds-proxy.mjs") }),
    );
  },
};
// `fetch` is the loopback one of build/loopback-fetch.mjs in the Node builds (not undici's: see there).
const common = {
  entryPoints: [join(root, "agent/main.ts")],
  bundle: true,
  platform: "node",
  target: "node20",
  logLevel: "warning",
  legalComments: "none",
  inject: [join(root, "build/loopback-fetch.mjs")],
  plugins: [splitXdsProxy],
};
// The ESM bundle runs with `node dist/lastcall.mjs`; createRequire lets bundled CommonJS
// dependencies require Node built-ins.
await build({
  ...common,
  format: "esm",
  outfile: join(dist, "lastcall.mjs"),
  banner: {
    js:
      "import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);",
  },
});
// Single executables run CommonJS only.
await build({
  ...common,
  format: "cjs",
  outfile: join(dist, "lastcall.cjs"),
  define: { "import.meta.url": "__lastcall_url" },
  banner: { js: "const __lastcall_url = require('node:url').pathToFileURL(__filename).href;" },
});

// The single executable's bundle: the CommonJS one as the function Node wraps a module in, and all
// ASCII (esbuild escapes strings, not comments), for build/sea-main.cjs to read as Latin-1.
const seaBundle = join(dist, "lastcall.sea.cjs");
const ascii = readFileSync(join(dist, "lastcall.cjs"), "utf8")
  .replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
writeFileSync(
  seaBundle,
  `(function (exports, require, module, __filename, __dirname) {${ascii}\n})`,
);

// V8's code cache of one start of `lastcall run`, for the single executable (build/sea-main.cjs).
// The start runs to Envoy's spawn and past it: the "Envoy" is Node itself, which the start then
// refuses (exit 2), so the build needs no Envoy.
const cache = join(dist, "lastcall.cache");
rmSync(cache, { force: true });
const training = spawnSync(process.execPath, [
  join(root, "build/sea-main.cjs"),
  seaBundle,
  cache,
  ...["run", "--config", join(root, "examples/envoy.yaml")],
  ...["--status-address", "127.0.0.1", "--status-port", "0"],
], { encoding: "utf8", env: { ...process.env, ENVOY_BIN: process.execPath }, timeout: 60_000 });
if (!existsSync(cache) || statSync(cache).size === 0) {
  console.error(
    `lastcall build: no code cache from a start:\n${training.stdout}${training.stderr}`,
  );
  process.exit(1);
}

const seaConfig = join(dist, "sea-config.json");
writeFileSync(
  seaConfig,
  JSON.stringify({
    // The bundle and its code cache are assets the entry compiles; import() fails there, so the
    // other embedded assets are read through require("node:sea") too.
    main: join(root, "build/sea-main.cjs"),
    output: join(dist, "lastcall.blob"),
    disableExperimentalSEAWarning: true,
    assets: {
      "lastcall.cjs": seaBundle,
      "lastcall.cache": cache,
      "filter.wasm": wasm,
      "xds-proxy.cjs": join(dist, "xds-proxy.cjs"),
    },
  }),
);
/** Runs a build step quietly; prints its output only when it fails. */
function step(args) {
  const result = spawnSync(process.execPath, args, { encoding: "utf8" });
  if (result.status !== 0) {
    console.error(`lastcall build: ${args.join(" ")} failed:\n${result.stdout}${result.stderr}`);
    process.exit(1);
  }
}

step(["--experimental-sea-config", seaConfig]);
// Built beside the old binary and renamed over it: a running `dist/lastcall` (ETXTBSY on a
// write in place) keeps its own copy, and no reader ever sees half a binary.
const binary = join(dist, "lastcall");
const building = `${binary}.${process.pid}.tmp`;
copyFileSync(process.execPath, building);
step([
  join(root, "node_modules/postject/dist/cli.js"),
  building,
  "NODE_SEA_BLOB",
  join(dist, "lastcall.blob"),
  "--sentinel-fuse",
  "NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2",
]);
renameSync(building, binary);
