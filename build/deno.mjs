#!/usr/bin/env node
// The Deno the tests and `npm run check` use: DENO_BIN, else the pinned `deno` npm package
// installed on demand into .cache/deno/.
import { spawnSync } from "node:child_process";
import { mkdirSync, renameSync, rmSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { isExecutable } from "./envoy.mjs";

export const DENO_PACKAGE = "deno@2.9.6";
const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const prefix = join(root, ".cache", "deno");
const binary = join(prefix, "node_modules", "deno", "deno");

/** Returns the absolute path of the Deno binary, installing the pinned package first if needed. */
export function resolveDeno() {
  const fromEnv = process.env.DENO_BIN;
  if (fromEnv) {
    if (!isExecutable(fromEnv)) throw new Error(`DENO_BIN is not an executable file: ${fromEnv}`);
    return resolve(fromEnv);
  }
  if (isExecutable(binary)) return binary;
  rmSync(prefix, { recursive: true, force: true }); // an install cut short
  // Installed beside the target, then renamed into place: test files running in parallel may
  // both get here, and neither must see a half-installed package.
  const staging = `${prefix}.${process.pid}`;
  rmSync(staging, { recursive: true, force: true });
  mkdirSync(staging, { recursive: true });
  const result = spawnSync("npm", [
    "install",
    "--no-save",
    "--no-audit",
    "--no-fund",
    "--loglevel=error",
    "--prefix",
    staging,
    DENO_PACKAGE,
  ], { encoding: "utf8", env: { ...process.env, npm_config_update_notifier: "false" } });
  if (result.status !== 0) {
    rmSync(staging, { recursive: true, force: true });
    throw new Error(
      `Cannot install Deno: npm install ${DENO_PACKAGE} failed:\n${result.stdout ?? ""}${
        result.stderr ?? result.error ?? ""
      }`.trim(),
    );
  }
  try {
    renameSync(staging, prefix);
  } catch (error) {
    // Another process installed it first: keep theirs.
    rmSync(staging, { recursive: true, force: true });
    if (!isExecutable(binary)) throw error;
  }
  if (!isExecutable(binary)) {
    throw new Error(`Cannot install Deno: ${DENO_PACKAGE} installed but ${binary} is missing`);
  }
  return binary;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  let deno;
  try {
    deno = resolveDeno();
  } catch (error) {
    console.error(`lastcall: ${error.message}`);
    process.exit(1);
  }
  const result = spawnSync(deno, process.argv.slice(2), { cwd: root, stdio: "inherit" });
  process.exit(result.status ?? 1);
}
