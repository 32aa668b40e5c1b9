// Podman for the container tests, with the project's settings (build/image.mjs: project-local
// storage, build/containers.conf, runc with cgroupfs). Pods run with `--network none`: their
// only interface is their own loopback, and the tests reach it by entering the namespace.
import { type ChildProcess, spawn } from "node:child_process";
import { accessSync, constants, mkdirSync, writeFileSync } from "node:fs";
import { delimiter, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { INSTALL_COMMAND, missingTools, podman as runPodman } from "../../build/image.mjs";
import { followJsonEvents } from "./json-events.ts";

/** Runs podman with the project's settings; resolves with its standard output. */
export const podman: (args: string[]) => Promise<string> = runPodman;

/** What the container tests need and this machine lacks, and the command that installs it. */
export function containerToolsMissing(): { missing: string[]; install: string } | undefined {
  const missing: string[] = missingTools();
  const nsenter = [...(process.env.PATH ?? "").split(delimiter), "/usr/bin"].some((dir) => {
    try {
      accessSync(join(dir, "nsenter"), constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
  if (!nsenter) missing.push("nsenter");
  return missing.length > 0
    ? { missing, install: `${INSTALL_COMMAND}${nsenter ? "" : " util-linux"}` }
    : undefined;
}

/**
 * Why the container tests cannot run here (said on stderr, with the command that fixes it), or
 * undefined when they can.
 */
export function containerTestsSkipReason(): string | undefined {
  const missing = containerToolsMissing();
  const reason = missing
    ? `needs ${missing.missing.join(", ")}: install with \`${missing.install}\``
    : process.getuid?.() !== 0
    ? "needs root (podman's storage in the project, nsenter into the pod)"
    : undefined;
  if (reason) console.warn(`container tests skipped: ${reason}`);
  return reason;
}

/** A container's end as podman recorded it. */
export interface ContainerState {
  /** Exit code of its main process. */
  exitCode: number;
  /** When it started and ended, in epoch ms. */
  startedAt: number;
  finishedAt: number;
  /** Host pid of its main process while it runs, else 0. */
  pid: number;
}

// Podman prints nanoseconds; Date.parse wants at most milliseconds.
const epochMs = (time: string): number => Date.parse(time.replace(/(\.\d{3})\d+/, "$1"));

/** Reads a container's state (`podman inspect`). */
export async function containerState(name: string): Promise<ContainerState> {
  const [info] = JSON.parse(await podman(["inspect", "--type", "container", name]));
  return {
    exitCode: info.State.ExitCode,
    startedAt: epochMs(info.State.StartedAt),
    finishedAt: epochMs(info.State.FinishedAt),
    pid: info.State.Pid,
  };
}

/**
 * Plays a Kubernetes manifest with `podman play kube --replace --network none` (the pod's only
 * interface is its loopback; the tests enter it), kept as `.cache/container/<file>` for a look
 * after a failure; resolves with the pod's network namespace.
 */
export async function playPod(pod: string, file: string, manifest: string): Promise<string> {
  const dir = resolve(dirname(fileURLToPath(import.meta.url)), "../../.cache/container");
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, file), manifest);
  await podman(["play", "kube", "--replace", "--network", "none", join(dir, file)]);
  return podNetworkNamespace(pod);
}

/** The network namespace of a running pod, as a path `nsenter --net=` takes. */
export async function podNetworkNamespace(pod: string): Promise<string> {
  const infra = (await podman(["pod", "inspect", pod, "--format", "{{.InfraContainerID}}"])).trim();
  const { pid } = await containerState(infra);
  if (!pid) throw new Error(`Cannot enter pod ${pod}: its infra container ${infra} is not running`);
  return `/proc/${pid}/ns/net`;
}

/** lastcall's JSON event lines in a container's log (Envoy's own lines are skipped). */
export async function lastcallEvents(
  container: string,
): Promise<Array<{ ts: string; event: string; [field: string]: unknown }>> {
  const log = await podman(["logs", container]);
  return log.split("\n").filter((line) => line.startsWith('{"ts"')).map((line) => JSON.parse(line));
}

/** Removes a pod and its containers, whatever state they are in; never throws. */
export async function removePod(pod: string): Promise<void> {
  await podman(["pod", "rm", "--force", "--ignore", pod]).catch(() => {});
}

/** One JSON line of a script run by {@linkcode runInPod}. */
export interface PodScriptEvent {
  event: string;
  t: number;
  [field: string]: unknown;
}

/** A script running in a pod's network namespace, its JSON lines followed. */
export interface PodScript {
  events: PodScriptEvent[];
  /** Resolves with the first line whose `event` is `event` (past or future). */
  next(event: string, timeoutMs: number): Promise<PodScriptEvent>;
  child: ChildProcess;
}

/**
 * Runs a Node script of the tests in a pod's network namespace (`nsenter --net`), with `config`
 * as its JSON argument, and follows its JSON lines on stdout.
 *
 * @example
 * ```ts
 * const client = runInPod(await podNetworkNamespace("demo"), "test/container/pod-client.mjs", { listener });
 * await client.next("inflight", 60_000);
 * ```
 */
export function runInPod(netns: string, script: string, config: object = {}): PodScript {
  const child = spawn("nsenter", [
    `--net=${netns}`,
    process.execPath,
    script,
    JSON.stringify(config),
  ], { stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stderr?.on("data", (chunk) => (stderr += chunk));
  const follow = followJsonEvents<PodScriptEvent>(child.stdout!);
  const events = follow.events;
  child.once("close", () => follow.end());
  const next = (event: string, timeoutMs: number) =>
    follow.next(event, {
      timeoutMs,
      ended: () =>
        new Error(`${script} exited before ${event}: ${stderr || JSON.stringify(events)}`),
      timedOut: () => new Error(`${script}: no ${event} within ${timeoutMs} ms; stderr: ${stderr}`),
    });
  return { events, next, child };
}
