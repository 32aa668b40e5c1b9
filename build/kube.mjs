#!/usr/bin/env node
// `node build/kube.mjs [name…]`: builds the test cluster's binaries and pause image into a cache
// outside the clone, where missing.
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import {
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { homedir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { withLock } from "./lock.mjs";
import { onPath } from "./on-path.mjs";

export { onPath };

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const sources = join(root, "build", "kube");

/** The Kubernetes version the cluster runs (build/kube/k8s/go.mod requires it). */
export const KUBE_VERSION = "1.34.4";
/** The six Kubernetes binaries, in the order they are built (the API server and kubectl first). */
export const K8S_BINARIES = [
  "kube-apiserver",
  "kubectl",
  "kubelet",
  "kube-controller-manager",
  "kube-scheduler",
  "kube-proxy",
];
/** The pause / test image every pod sandbox uses (containerd's sandbox_image). */
export const KT_IMAGE = "localhost/lastcall-kt:1";
/** The Debian packages the cluster needs besides these binaries. */
export const KUBE_PACKAGES =
  "containerd runc containernetworking-plugins iptables conntrack busybox-static openssl";

/**
 * Where everything lives: the cache folder, each binary's path, the kt image archive.
 *
 * @example
 * const { bin } = kubePaths();
 * spawn(bin.kubectl, ["version", "--client"]);
 */
export function kubePaths() {
  const cache = resolve(
    process.env.LASTCALL_KUBE_CACHE ??
      join(homedir(), ".cache", "lastcall", `kube-v${KUBE_VERSION}`),
  );
  const bin = Object.fromEntries(
    [...K8S_BINARIES, "etcd"].map((name) => [name, join(cache, "bin", name)]),
  );
  return { cache, bin, ktImage: join(cache, "images", "kt.tar") };
}

/** Every artifact by name (the binaries, and "kt" for the image) with its path. */
function artifacts() {
  const { bin, ktImage } = kubePaths();
  return { ...bin, kt: ktImage };
}

/**
 * The artifacts not in the cache yet (names as `node build/kube.mjs` takes them); the kt image
 * also counts as missing when its sources changed since it was built.
 *
 * @example
 * missingArtifacts(["kube-apiserver", "kubectl", "etcd"]); // [] once built
 */
export function missingArtifacts(names = Object.keys(artifacts())) {
  const paths = artifacts();
  return names.filter((name) => {
    if (!existsSync(paths[name])) return true;
    return name === "kt" && readKey(paths.kt) !== ktKey();
  });
}

const readKey = (path) => {
  try {
    return readFileSync(`${path}.key`, "utf8").trim();
  } catch {
    return "";
  }
};

function ktKey() {
  const hash = createHash("sha256");
  for (const name of readdirSync(join(sources, "kt")).sort()) {
    hash.update(name).update(readFileSync(join(sources, "kt", name)));
  }
  return hash.update(KT_IMAGE).digest("hex").slice(0, 16);
}

/** Runs a command; resolves with its output, rejects with the command and its output's tail. */
function run(command, args, { cwd = root, env = process.env } = {}) {
  return new Promise((done, fail) => {
    const child = spawn(command, args, { cwd, env, stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    child.stdout.on("data", (chunk) => (output += chunk));
    child.stderr.on("data", (chunk) => (output += chunk));
    child.once("error", (error) => fail(new Error(`Cannot run ${command}: ${error.message}`)));
    child.once("close", (code) => {
      if (code === 0) return done(output);
      fail(
        new Error(
          `${command} ${args.join(" ")} failed (exit ${code}):\n${
            output.trim().split("\n").slice(-30).join("\n")
          }`,
        ),
      );
    });
  });
}

function goCommand() {
  const go = onPath("go");
  if (!go) {
    throw new Error(
      "Cannot build the test cluster: go (>= 1.24) is not on PATH nor in /usr/local/go/bin (https://go.dev/dl)",
    );
  }
  return go;
}

/** `go build` of one package into `out` (written beside, then renamed: never half a binary). */
async function goBuild(moduleDir, pkg, out, ldflags) {
  mkdirSync(dirname(out), { recursive: true });
  const env = { ...process.env, CGO_ENABLED: "0", GOFLAGS: "-buildvcs=false" };
  await run(goCommand(), ["build", "-trimpath", "-ldflags", ldflags, "-o", `${out}.tmp`, pkg], {
    cwd: moduleDir,
    env,
  });
  renameSync(`${out}.tmp`, out);
}

function k8sLdflags() {
  const [major, minor] = KUBE_VERSION.split(".");
  const v = `v${KUBE_VERSION}`;
  return [
    "-s -w",
    `-X k8s.io/component-base/version.gitVersion=${v}`,
    `-X k8s.io/component-base/version.gitMajor=${major}`,
    `-X k8s.io/component-base/version.gitMinor=${minor}`,
    "-X k8s.io/component-base/version.gitTreeState=clean",
    `-X k8s.io/client-go/pkg/version.gitVersion=${v}`,
  ].join(" ");
}

async function buildKt(out) {
  const { podman } = await import("./image.mjs");
  const busybox = ["/bin/busybox", "/usr/bin/busybox"].find((p) => existsSync(p));
  if (!busybox) {
    throw new Error(
      "Cannot build the kt image: busybox is missing (apt-get install -y busybox-static)",
    );
  }
  const context = join(root, ".cache", "kube", "kt-image");
  rmSync(context, { recursive: true, force: true });
  mkdirSync(context, { recursive: true });
  try {
    await goBuild(join(sources, "kt"), ".", join(context, "kt"), "-s -w");
    cpSync(busybox, join(context, "busybox"));
    writeFileSync(
      join(context, "Containerfile"),
      'FROM scratch\nCOPY kt /kt\nCOPY busybox /bin/busybox\nENTRYPOINT ["/kt"]\n',
    );
    await podman([
      "build",
      "--quiet",
      "--layers=false",
      "--pull=never",
      "--network",
      "none",
      "-t",
      KT_IMAGE,
      context,
    ]);
    mkdirSync(dirname(out), { recursive: true });
    rmSync(`${out}.tmp`, { force: true });
    await podman(["save", "--quiet", "--format", "docker-archive", "-o", `${out}.tmp`, KT_IMAGE]);
    renameSync(`${out}.tmp`, out);
    writeFileSync(`${out}.key`, `${ktKey()}\n`);
  } finally {
    rmSync(context, { recursive: true, force: true });
  }
}

/** Builds one artifact by name. */
function buildOne(name, path) {
  if (name === "kt") return buildKt(path);
  if (name === "etcd") return goBuild(join(sources, "etcd"), ".", path, "-s -w");
  return goBuild(join(sources, "k8s"), `k8s.io/kubernetes/cmd/${name}`, path, k8sLdflags());
}

/**
 * Builds what is missing from the cache, one artifact at a time (2 cores), holding a lock in the
 * cache so parallel callers wait for one build; resolves with the names it built.
 *
 * @param {{ names?: string[], log?: (line: string) => void }} [options] `names`: only these
 *   artifacts (default all: the six Kubernetes binaries, etcd, kt); `log`: a line per build
 * @returns {Promise<{ built: string[], paths: ReturnType<typeof kubePaths> }>}
 * @example
 * const { paths } = await buildKube({ names: ["etcd", "kube-apiserver", "kubectl"] });
 */
export async function buildKube({ names, log = () => {} } = {}) {
  const all = artifacts();
  const wanted = names ?? Object.keys(all);
  const unknown = wanted.filter((name) => !(name in all));
  if (unknown.length > 0) {
    throw new Error(
      `Unknown artifact ${unknown.join(", ")} (one of ${Object.keys(all).join(", ")})`,
    );
  }
  const built = [];
  if (missingArtifacts(wanted).length > 0) {
    await withLock(join(kubePaths().cache, "build.lock"), async () => {
      for (const name of missingArtifacts(wanted)) {
        const started = Date.now();
        log(`building ${name}`);
        await buildOne(name, all[name]);
        log(`built ${name} in ${((Date.now() - started) / 1000).toFixed(0)} s`);
        built.push(name);
      }
    }, { what: "the build lock", waitMs: 60 * 60_000, pollMs: 500 });
  }
  return { built, paths: kubePaths() };
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const names = process.argv.slice(2);
  const known = Object.keys(artifacts());
  const bad = names.find((name) => !known.includes(name));
  if (bad) {
    console.error(`kube: unknown artifact ${JSON.stringify(bad)} (one of ${known.join(", ")})`);
    process.exit(2);
  }
  const started = Date.now();
  try {
    const { built } = await buildKube({
      names: names.length ? names : undefined,
      log: (line) => console.error(`kube: ${line}`),
    });
    if (built.length) {
      console.error(
        `kube: built ${built.join(", ")} in ${
          ((Date.now() - started) / 1000).toFixed(0)
        } s into ${kubePaths().cache}`,
      );
    }
  } catch (error) {
    console.error(`kube: ${error.message}`);
    process.exit(1);
  }
}
