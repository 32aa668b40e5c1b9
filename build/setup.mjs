#!/usr/bin/env node
// Everything a fresh clone needs, quiet unless something fails: npm dependencies, the Envoy
// binary (see build/envoy.mjs), the filter module and the agent (bundle + single executable).
// Only Node's built-ins are used here, since this runs before node_modules exists.
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");

function run(command, args, what) {
  const result = spawnSync(command, args, {
    cwd: root,
    encoding: "utf8",
    env: { ...process.env, npm_config_update_notifier: "false" },
  });
  if (result.status !== 0) {
    console.error(
      `lastcall setup: ${what} failed (${command} ${args.join(" ")}):\n${result.stdout ?? ""}${
        result.stderr ?? result.error ?? ""
      }`,
    );
    process.exit(1);
  }
}

function installed() {
  const marker = join(root, "node_modules", ".package-lock.json");
  if (!existsSync(marker)) return false;
  return statSync(marker).mtimeMs >= statSync(join(root, "package-lock.json")).mtimeMs;
}

/** Installs, fetches and builds; returns the Envoy binary path. */
export async function setup() {
  // `npm ci`: exactly the committed lock, or a clear failure when package.json and the lock
  // disagree. Deno, whose lock entries could not be complete here, is installed apart, on
  // demand (build/deno.mjs).
  if (!installed()) run("npm", ["ci", "--no-audit", "--no-fund", "--loglevel=error"], "npm ci");
  const { resolveEnvoy, envoyVersion } = await import("./envoy.mjs");
  let envoy;
  try {
    envoy = resolveEnvoy();
  } catch (error) {
    console.error(`lastcall setup: ${error.message}`);
    process.exit(1);
  }
  run("npm", ["run", "--silent", "build"], "build");
  return { envoy, version: envoyVersion(envoy) };
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const { envoy, version } = await setup();
  const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
  console.log(`lastcall ${pkg.version} built (dist/lastcall); envoy ${version} at ${envoy}`);
}
