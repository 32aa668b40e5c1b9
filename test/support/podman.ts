// Podman for the container tests, with the project's settings (build/image.mjs: project-local
// storage, build/containers.conf, runc with cgroupfs). Pods run with `--network none`: their
// only interface is their own loopback, and the tests reach it by entering the namespace.
import { accessSync, constants } from "node:fs";
import { delimiter, join } from "node:path";
import { INSTALL_COMMAND, missingTools, podman as runPodman } from "../../build/image.mjs";

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
  return missing.length > 0 ? { missing, install: `${INSTALL_COMMAND}${nsenter ? "" : " util-linux"}` } : undefined;
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
  return { exitCode: info.State.ExitCode, startedAt: epochMs(info.State.StartedAt), finishedAt: epochMs(info.State.FinishedAt), pid: info.State.Pid };
}

/** The network namespace of a running pod, as a path `nsenter --net=` takes. */
export async function podNetworkNamespace(pod: string): Promise<string> {
  const infra = (await podman(["pod", "inspect", pod, "--format", "{{.InfraContainerID}}"])).trim();
  const { pid } = await containerState(infra);
  if (!pid) throw new Error(`Cannot enter pod ${pod}: its infra container ${infra} is not running`);
  return `/proc/${pid}/ns/net`;
}

/** lastcall's JSON event lines in a container's log (Envoy's own lines are skipped). */
export async function lastcallEvents(container: string): Promise<Array<{ ts: string; event: string; [field: string]: unknown }>> {
  const log = await podman(["logs", container]);
  return log.split("\n").filter((line) => line.startsWith("{\"ts\"")).map((line) => JSON.parse(line));
}

/** Removes a pod and its containers, whatever state they are in; never throws. */
export async function removePod(pod: string): Promise<void> {
  await podman(["pod", "rm", "--force", "--ignore", pod]).catch(() => {});
}
