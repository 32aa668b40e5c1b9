#!/usr/bin/env node
// `npm run image`: builds lastcall's image with podman from the Dockerfile, on local stand-ins for
// its base images.
import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  cpSync,
  createReadStream,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { withLock } from "./lock.mjs";
import { onPath } from "./on-path.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const work = join(root, ".cache", "image");
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));

/** Image name of lastcall's own image; tagged with the version and with the build's hash. */
export const IMAGE = "localhost/lastcall";
/** Where the stand-ins of the Dockerfile's base images are tagged. */
export const BASE = "localhost/lastcall-base";
/** The command that installs what this script and the container tests need (Debian). */
export const INSTALL_COMMAND = "apt-get install -y podman runc mmdebstrap";

/** Settings podman gets on every call: project-local storage and config, runc with cgroupfs. */
export function podmanSetup() {
  const storage = resolve(process.env.LASTCALL_PODMAN_ROOT ?? join(root, ".cache", "podman"));
  return {
    // vfs: no overlay mounts needed (none may be allowed); runc: crun fails on this kind of
    // host's cgroups; cgroupfs: no systemd to ask for scopes.
    args: [
      "--root",
      join(storage, "storage"),
      "--runroot",
      join(storage, "run"),
      "--tmpdir",
      join(storage, "tmp"),
      "--storage-driver",
      "vfs",
      "--runtime",
      onPath("runc") ?? "/usr/sbin/runc",
      "--cgroup-manager",
      "cgroupfs",
      "--events-backend",
      "file",
    ],
    env: { ...process.env, CONTAINERS_CONF: join(root, "build", "containers.conf") },
  };
}

/** The tools this script needs that are not installed (podman, runc, mmdebstrap). */
export function missingTools() {
  return ["podman", "runc", "mmdebstrap"].filter((tool) => !onPath(tool));
}

/** Runs a command; resolves with its output, rejects with it (and the command) on failure. */
function run(command, args, { env } = {}) {
  return new Promise((done, fail) => {
    const child = spawn(command, args, {
      cwd: root,
      env: env ?? process.env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk) => (stdout += chunk));
    child.stderr.on("data", (chunk) => (stderr += chunk));
    child.once("error", (error) => fail(new Error(`Cannot run ${command}: ${error.message}`)));
    child.once("close", (code) => {
      if (code === 0) return done(stdout);
      const tail = `${stdout}${stderr}`.trim().split("\n").slice(-40).join("\n");
      fail(new Error(`${command} ${args.join(" ")} failed (exit ${code}):\n${tail}`));
    });
  });
}

/** Runs podman with the project's settings; resolves with its standard output. */
export function podman(args) {
  const setup = podmanSetup();
  return run("podman", [...setup.args, ...args], { env: setup.env });
}

function imageExists(tag) {
  const setup = podmanSetup();
  return spawnSync("podman", [...setup.args, "image", "exists", tag], { env: setup.env }).status ===
    0;
}

/** Removes the other tags of `tag`'s repository, so rebuilt stand-ins do not pile up. */
async function removeOlderTags(tag, keep = () => false) {
  const repository = tag.slice(0, tag.lastIndexOf(":"));
  const listed = await podman(["images", "--format", "{{.Repository}}:{{.Tag}}", repository]);
  const stale = listed.split("\n").filter((t) =>
    t && t !== tag && t.startsWith(`${repository}:`) && !keep(t)
  );
  if (stale.length > 0) await podman(["rmi", "--force", ...stale]).catch(() => {});
}

function sha256(...parts) {
  const hash = createHash("sha256");
  for (const part of parts) hash.update(part).update("\0");
  return hash.digest("hex");
}

function fileHash(path) {
  return new Promise((done, fail) => {
    const hash = createHash("sha256");
    createReadStream(path).on("data", (chunk) => hash.update(chunk)).once("error", fail).once(
      "end",
      () => done(hash.digest("hex")),
    );
  });
}

/** Hashes the files of a folder that `filter` keeps (names, modes, contents, link targets). */
async function treeHash(dir, filter) {
  const hash = createHash("sha256");
  const walk = async (folder) => {
    for (const name of readdirSync(folder).sort()) {
      const path = join(folder, name);
      const rel = relative(dir, path);
      const stat = lstatSync(path);
      if (stat.isDirectory()) {
        if (filter.enter(rel)) await walk(path);
      } else if (!filter.include(rel)) {
        continue;
      } else if (stat.isSymbolicLink()) {
        hash.update(`${rel}\0link\0${readlinkSync(path)}\0`);
      } else if (stat.isFile()) {
        hash.update(`${rel}\0${stat.mode & 0o111 ? "x" : "-"}\0${await fileHash(path)}\0`);
      }
    }
  };
  await walk(dir);
  return hash.digest("hex");
}

/**
 * What `.dockerignore` leaves in the build context, for the cache key: `include(path)` for a
 * file, `enter(path)` for a folder that holds included files. Its patterns are `*` (every
 * top-level entry), plain paths (an entry and everything under it), and `!path` exceptions;
 * the last pattern that matches decides, as in Docker.
 */
function contextFilter() {
  const patterns = readFileSync(join(root, ".dockerignore"), "utf8").split("\n").map((l) =>
    l.trim()
  )
    .filter((l) => l && !l.startsWith("#")).map((l) =>
      l.replace(/^(!?)\//, "$1").replace(/\/$/, "")
    );
  const matches = (pattern, rel) =>
    pattern === "*" || rel === pattern || rel.startsWith(`${pattern}/`);
  const include = (rel) => {
    let included = true;
    for (const pattern of patterns) {
      if (pattern.startsWith("!")) {
        if (matches(pattern.slice(1), rel)) included = true;
      } else if (matches(pattern, rel)) {
        included = false;
      }
    }
    return included;
  };
  const enter = (rel) => include(rel) || patterns.some((p) => p.startsWith(`!${rel}/`));
  return { include, enter };
}

/** Prepares a build context folder: files copied in (target path → source path), a Containerfile. */
function context(name, files, containerfile) {
  const dir = join(work, name);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  for (const [target, source] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, target)), { recursive: true });
    cpSync(source, join(dir, target), { recursive: true });
  }
  writeFileSync(join(dir, "Containerfile"), containerfile);
  return dir;
}

const DEBIAN = { suite: "bookworm", variant: "minbase", recipe: 1 };

async function debianImage(log) {
  const key = sha256(JSON.stringify(DEBIAN)).slice(0, 12);
  const tag = `${BASE}/debian:${DEBIAN.suite}-${key}`;
  if (imageExists(tag)) return tag;
  log(`debian ${DEBIAN.suite} (${DEBIAN.variant}) with mmdebstrap`);
  mkdirSync(work, { recursive: true });
  const tar = join(work, `debian-${key}.tar`);
  try {
    await run("mmdebstrap", ["--quiet", `--variant=${DEBIAN.variant}`, DEBIAN.suite, tar]);
    await podman(["import", "--quiet", "--change", 'CMD ["/bin/bash"]', tar, tag]);
  } finally {
    rmSync(tar, { force: true });
  }
  await removeOlderTags(tag);
  return tag;
}

function npmRoot() {
  const cli = onPath("npm");
  if (!cli) throw new Error("Cannot build the node stand-in: npm is not on PATH");
  // npm is a link to …/node_modules/npm/bin/npm-cli.js
  return resolve(dirname(realpathSync(cli)), "..");
}

async function nodeImage(debian, log) {
  const [major, minor] = process.versions.node.split(".").map(Number);
  if (major < 20 || (major === 20 && minor < 12)) {
    throw new Error(
      `Cannot build the node stand-in: Node ${process.versions.node} is older than package.json's engines (>= 20.12)`,
    );
  }
  const npm = npmRoot();
  const npmVersion = JSON.parse(readFileSync(join(npm, "package.json"), "utf8")).version;
  const containerfile = `FROM ${debian}\nCOPY rootfs/ /\nCMD ["node"]\n`;
  const key = sha256(debian, await fileHash(process.execPath), npmVersion, containerfile).slice(
    0,
    12,
  );
  const tag = `${BASE}/node:${process.versions.node}-${key}`;
  if (imageExists(tag)) return tag;
  log(`node ${process.versions.node} with npm ${npmVersion}`);
  const dir = context("node", {
    "rootfs/usr/local/bin/node": process.execPath,
    "rootfs/usr/local/lib/node_modules/npm": npm,
  }, containerfile);
  symlinkSync("../lib/node_modules/npm/bin/npm-cli.js", join(dir, "rootfs/usr/local/bin/npm"));
  symlinkSync("../lib/node_modules/npm/bin/npx-cli.js", join(dir, "rootfs/usr/local/bin/npx"));
  await podman([
    "build",
    "--quiet",
    "--layers=false",
    "--pull=never",
    "--network",
    "none",
    "-t",
    tag,
    dir,
  ]);
  rmSync(dir, { recursive: true, force: true });
  await removeOlderTags(tag);
  return tag;
}

async function envoyImage(debian, log) {
  const { resolveEnvoy, envoyVersion } = await import("./envoy.mjs");
  const envoy = resolveEnvoy();
  const version = envoyVersion(envoy).split("/")[0];
  // As the official image: the binary at /usr/local/bin/envoy, a user and group envoy with id 101.
  const containerfile = [
    `FROM ${debian}`,
    "COPY envoy /usr/local/bin/envoy",
    "RUN echo 'envoy:x:101:101::/home/envoy:/usr/sbin/nologin' >> /etc/passwd && echo 'envoy:x:101:' >> /etc/group \\",
    " && mkdir -p /etc/envoy /home/envoy && chown 101:101 /home/envoy",
    'CMD ["envoy", "-c", "/etc/envoy/envoy.yaml"]',
    "",
  ].join("\n");
  const key = sha256(debian, await fileHash(envoy), containerfile).slice(0, 12);
  const tag = `${BASE}/envoy:${version}-${key}`;
  if (imageExists(tag)) return tag;
  log(`envoy ${version} from ${envoy}`);
  const dir = context("envoy", { envoy }, containerfile);
  await podman([
    "build",
    "--quiet",
    "--layers=false",
    "--pull=never",
    "--network",
    "none",
    "-t",
    tag,
    dir,
  ]);
  rmSync(dir, { recursive: true, force: true });
  await removeOlderTags(tag);
  return tag;
}

/**
 * This machine's npm registry and the certificates npm trusts for it (`cafile`: a registry
 * behind a TLS-inspecting proxy needs them), as build secrets for the build stage's `npm ci`
 * (the Dockerfile mounts `npmrc` at /root/.npmrc and `npm_ca` at /run/secrets/npm_ca); secrets
 * land in no layer.
 */
async function npmSecrets() {
  const config = async (key) => {
    const value = (await run("npm", ["config", "get", key]).catch(() => "")).trim();
    return value === "null" || value === "undefined" ? "" : value;
  };
  const lines = [];
  const secrets = [];
  const registry = await config("registry");
  if (registry) lines.push(`registry=${registry}`);
  const cafile = await config("cafile");
  if (cafile) {
    lines.push("cafile=/run/secrets/npm_ca");
    secrets.push("--secret", `id=npm_ca,src=${cafile}`);
  }
  const file = join(work, "npmrc");
  mkdirSync(work, { recursive: true });
  writeFileSync(file, lines.map((l) => `${l}\n`).join(""), { mode: 0o600 });
  return ["--secret", `id=npmrc,src=${file}`, ...secrets];
}

/**
 * Builds (or finds) the stand-in base images and lastcall's image from the Dockerfile.
 *
 * @param {{ log?: (line: string) => void }} [options] `log` receives one line per image built
 * @returns {Promise<{ lastcall: string, node: string, envoy: string, debian: string, built: string[] }>}
 */
export function buildImages({ log = () => {} } = {}) {
  // The container test files run in parallel workers and each asks for the images: one builds,
  // the others wait for it and then find them cached.
  return withLock(join(work, "build.lock"), () => buildUnlocked(log), {
    what: "the image build lock",
    waitMs: 30 * 60_000,
  });
}

async function buildUnlocked(log) {
  const missing = missingTools();
  if (missing.length > 0) {
    throw new Error(`Cannot build images: ${missing.join(", ")} missing (${INSTALL_COMMAND})`);
  }
  const built = [];
  const note = (what) => {
    built.push(what);
    log(`building ${what}`);
  };
  const debian = await debianImage(note);
  const node = await nodeImage(debian, note);
  const envoy = await envoyImage(debian, note);
  const dockerfile = readFileSync(join(root, "Dockerfile"), "utf8");
  const key = sha256(dockerfile, node, envoy, await treeHash(root, contextFilter())).slice(0, 12);
  const tag = `${IMAGE}:build-${key}`;
  const versionTag = `${IMAGE}:${pkg.version}`;
  if (!imageExists(tag)) {
    note(`${versionTag} from the Dockerfile`);
    // Host network for the build stage's `npm ci` only; the final stage runs nothing.
    await podman([
      "build",
      "--quiet",
      "--layers=false",
      "--pull=never",
      "--network",
      "host",
      ...(await npmSecrets()),
      "--build-arg",
      `NODE_IMAGE=${node}`,
      "--build-arg",
      `ENVOY_IMAGE=${envoy}`,
      "-t",
      tag,
      "-f",
      join(root, "Dockerfile"),
      root,
    ]);
    await removeOlderTags(tag, (t) => !t.startsWith(`${IMAGE}:build-`));
  }
  await podman(["tag", tag, versionTag]);
  return { lastcall: tag, node, envoy, debian, built };
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const started = Date.now();
  try {
    const images = await buildImages({ log: (line) => console.error(`lastcall image: ${line}`) });
    const seconds = ((Date.now() - started) / 1000).toFixed(0);
    console.log(
      `lastcall image: ${IMAGE}:${pkg.version} (${images.lastcall}), ${
        images.built.length ? `built in ${seconds} s` : "cached"
      }`,
    );
  } catch (error) {
    console.error(`lastcall image: ${error.message}`);
    process.exit(1);
  }
}
