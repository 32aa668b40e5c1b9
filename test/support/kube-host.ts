// What the test cluster changes on the host, read before it starts and put back once its daemons
// have stopped: iptables chains, mounts, network namespaces, the bridge, cgroups and sysctls; and
// the machine-wide lock that lets one cluster run at a time.
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { kubePaths } from "../../build/kube.mjs";
import { waitFor } from "./envoy.ts";
import { mustRun, runCommand } from "./kube-process.ts";

/** The bridge the node IP lives on (the CNI bridge plugin puts the pods on it). */
export const BRIDGE = "lastcall-k0";
/** Host settings the kubelet and kube-proxy may change; put back at stop. */
const SYSCTLS = [
  "vm/overcommit_memory",
  "vm/panic_on_oom",
  "kernel/panic",
  "kernel/panic_on_oops",
  "kernel/keys/root_maxkeys",
  "kernel/keys/root_maxbytes",
  "net/ipv4/conf/all/route_localnet",
  "net/ipv4/ip_forward",
];

/** The host as it was before the cluster started. */
export interface HostState {
  netns: string[];
  netnsDir: boolean;
  chains: string[];
  sysctls: Map<string, string>;
}

/** Reads what {@linkcode restoreHost} puts back. */
export async function readHostState(): Promise<HostState> {
  return {
    netns: listNetns(),
    netnsDir: existsSync("/run/netns"),
    chains: await kubeChains(),
    sysctls: readSysctls(),
  };
}

/**
 * Puts the host back as `before` found it, once the cluster's daemons have stopped: kube-proxy's
 * and CNI's chains, the mounts under `dir`, the pods' namespaces, the bridge, cgroups, sysctls.
 */
export async function restoreHost(
  before: HostState,
  dir: string,
  mark: (step: string) => void,
): Promise<void> {
  await runCommand(kubePaths().bin["kube-proxy"], ["--cleanup"], { timeoutMs: 30_000 });
  await removeNewChains(before.chains);
  mark("iptables clean");
  const mounts = readFileSync("/proc/mounts", "utf8").split("\n").map((l) => l.split(" ")[1])
    .filter((m) => m?.startsWith(`${dir}/`));
  for (const mount of mounts.reverse()) await runCommand("umount", ["-l", mount]);
  // Only the pods' namespaces, which containerd's CRI names cni-<uuid>: other tests on this
  // machine make their own (test/support/netns.ts: lastcall-t…) while the cluster runs, and
  // deleting every new one pulled a running test's namespace from under it.
  for (const ns of listNetns().filter((n) => n.startsWith("cni-") && !before.netns.includes(n))) {
    await runCommand("ip", ["netns", "delete", ns]);
  }
  try {
    if (!before.netnsDir && listNetns().length === 0) {
      // containerd bind-mounts /run/netns onto itself (shared) before it makes the first one.
      while (readFileSync("/proc/mounts", "utf8").includes(" /run/netns ")) {
        await mustRun("umount", ["/run/netns"]);
      }
      rmdirSync("/run/netns");
    }
  } catch {
    // a mount point or not empty: leave it
  }
  await runCommand("ip", ["link", "delete", BRIDGE]);
  removeKubeCgroups();
  for (const [key, value] of before.sysctls) {
    try {
      if (readFileSync(`/proc/sys/${key}`, "utf8").trim() !== value) {
        writeFileSync(`/proc/sys/${key}`, value);
      }
    } catch {
      // not settable here: leave it
    }
  }
}

function readSysctls(): Map<string, string> {
  const values = new Map<string, string>();
  for (const key of SYSCTLS) {
    try {
      values.set(key, readFileSync(`/proc/sys/${key}`, "utf8").trim());
    } catch {
      // not present here
    }
  }
  return values;
}

function listNetns(): string[] {
  return existsSync("/run/netns") ? readdirSync("/run/netns") : [];
}

const TABLES = ["filter", "nat", "mangle"];
const IPTABLES = ["iptables", "ip6tables"];

/** Chains named KUBE-… or CNI-… now, as "iptables table chain". */
async function kubeChains(): Promise<string[]> {
  const chains: string[] = [];
  for (const cmd of IPTABLES) {
    for (const table of TABLES) {
      const out = (await runCommand(cmd, ["-w", "-t", table, "-S"])).stdout;
      for (const [, chain] of out.matchAll(/^-N ((?:KUBE|CNI)-\S+)$/gm)) {
        chains.push(`${cmd} ${table} ${chain}`);
      }
    }
  }
  return chains;
}

/** Removes the KUBE- and CNI- chains the cluster made (and the rules that jump to them). */
async function removeNewChains(before: string[]): Promise<void> {
  const added = (await kubeChains()).filter((c) => !before.includes(c));
  for (const cmd of IPTABLES) {
    for (const table of TABLES) {
      const mine = new Set(
        added.filter((c) => c.startsWith(`${cmd} ${table} `)).map((c) => c.split(" ")[2]),
      );
      if (mine.size === 0) continue;
      const rules = (await runCommand(cmd, ["-w", "-t", table, "-S"])).stdout.split("\n");
      for (const rule of rules) {
        const m = /^-A (\S+) .*-j (\S+)/.exec(rule);
        if (m && !mine.has(m[1]) && mine.has(m[2])) {
          await runCommand(cmd, ["-w", "-t", table, ...rule.replace(/^-A /, "-D ").split(" ")]);
        }
      }
      for (const chain of mine) await runCommand(cmd, ["-w", "-t", table, "-F", chain]);
      for (const chain of mine) await runCommand(cmd, ["-w", "-t", table, "-X", chain]);
    }
  }
}

/** The kubelet's cgroups (kubepods in every v1 hierarchy), deepest first; only empty ones go. */
function removeKubeCgroups(): void {
  const removeTree = (path: string) => {
    for (const entry of readdirSync(path)) {
      const child = join(path, entry);
      if (statSync(child).isDirectory()) removeTree(child);
    }
    try {
      rmdirSync(path);
    } catch {
      // still has a process: leave it
    }
  };
  if (!existsSync("/sys/fs/cgroup")) return;
  for (const hierarchy of readdirSync("/sys/fs/cgroup")) {
    const path = join("/sys/fs/cgroup", hierarchy, "kubepods");
    if (existsSync(path)) removeTree(path);
  }
}

/** Waits for the machine-wide cluster lock (a folder in the kube cache); resolves with its release. */
export async function takeClusterLock(): Promise<() => void> {
  const lock = join(kubePaths().cache, "cluster.lock");
  const owner = join(lock, "pid");
  await waitFor(() => {
    try {
      mkdirSync(lock);
      writeFileSync(owner, String(process.pid));
      return true;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
      const pid = Number(existsSync(owner) ? readFileSync(owner, "utf8") : 0);
      if (pid > 0 && !isAlive(pid)) rmSync(lock, { recursive: true, force: true });
      return undefined;
    }
  }, {
    timeoutMs: 20 * 60_000,
    intervalMs: 500,
    what: `the test cluster lock ${lock} (another run's cluster)`,
  });
  return () => rmSync(lock, { recursive: true, force: true });
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}
