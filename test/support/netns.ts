// A network namespace of its own (`ip netns`) for tests of fixed ports, and what is left in it
// afterwards.
import { type ChildProcess, spawn, type SpawnOptions, spawnSync } from "node:child_process";
import { afterEach } from "vitest";

/** Why no namespace can be made here, or undefined when one can. */
export function netnsSkipReason(): string | undefined {
  if (process.getuid?.() !== 0) {
    return "needs root, for a network namespace of its own (ip netns): run the tests as root";
  }
  const ip = spawnSync("ip", ["netns", "list"], { encoding: "utf8" });
  if (ip.error || ip.status !== 0) {
    return "needs iproute2's ip netns: install with apt-get install -y iproute2";
  }
  return undefined;
}

/** How a command run in the namespace ended. */
export interface NetnsResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** A network namespace made for one test; deleted after it. */
export interface Netns {
  readonly name: string;
  /** Starts `command` in the namespace (`ip netns exec` execs it: the child's pid is the command's). */
  spawn(command: string, args: string[], options?: SpawnOptions): ChildProcess;
  /** Runs `command` in the namespace to its end. */
  run(command: string, args: string[]): Promise<NetnsResult>;
  /** Pids of every process in the namespace now. */
  pids(): number[];
  /** TCP ports listened on in the namespace now. */
  listeningPorts(): number[];
  /**
   * A link to this machine's namespace, as a pod has (a veth pair, a /30 of 10.240.0.0/16): the
   * pod's IP inside, reached from the test as the kubelet reaches a pod. Gone with the namespace.
   */
  podLink(): { podIp: string; hostIp: string };
  /** Kills what is left in it and deletes it. */
  remove(): void;
}

const made = new Set<Netns>();
afterEach(() => {
  for (const netns of made) netns.remove();
  made.clear();
});

let counter = 0;

function ipOrThrow(args: string[]): string {
  const result = spawnSync("ip", args, { encoding: "utf8" });
  if (result.status !== 0) {
    throw new Error(`ip ${args.join(" ")} failed: ${result.stderr || result.error}`);
  }
  return result.stdout;
}

/**
 * Makes a network namespace with loopback up; removed after the test (with anything left in it).
 *
 * @example
 * ```ts
 * const ns = createNetns();
 * const child = ns.spawn(process.execPath, ["build/start.mjs", "--no-setup"]);
 * ```
 */
export function createNetns(): Netns {
  const index = ++counter;
  const name = `lastcall-t${process.pid}-${index}`;
  ipOrThrow(["netns", "add", name]);
  let removed = false;
  const netns: Netns = {
    name,
    spawn: (command, args, options = {}) =>
      spawn("ip", ["netns", "exec", name, command, ...args], options),
    run: (command, args) =>
      new Promise((done) => {
        const child = spawn("ip", ["netns", "exec", name, command, ...args], {
          stdio: ["ignore", "pipe", "pipe"],
        });
        let stdout = "";
        let stderr = "";
        child.stdout!.on("data", (chunk) => (stdout += chunk));
        child.stderr!.on("data", (chunk) => (stderr += chunk));
        child.on("close", (code) => done({ code, stdout, stderr }));
      }),
    pids:
      () => (removed
        ? []
        : ipOrThrow(["netns", "pids", name]).split(/\s+/).filter(Boolean).map(Number)),
    listeningPorts: () =>
      [
        ...new Set(
          ipOrThrow(["netns", "exec", name, "ss", "-ltnH"]).split("\n").filter(Boolean)
            .map((line) => Number(/:(\d+)\s/.exec(line.split(/\s+/)[3] + " ")?.[1])),
        ),
      ].sort((a, b) => a - b),
    podLink: () => {
      // Per process and namespace, so test files running side by side never pick the same.
      const subnet = `10.240.${process.pid % 250}.${(index * 4) % 252}`.split(".").map(Number);
      const [hostIp, podIp] = [1, 2].map((n) => [...subnet.slice(0, 3), subnet[3] + n].join("."));
      const host = `lc${process.pid}n${index}`.slice(0, 15);
      ipOrThrow(["link", "add", host, "type", "veth", "peer", "name", "pod0", "netns", name]);
      ipOrThrow(["addr", "add", `${hostIp}/30`, "dev", host]);
      ipOrThrow(["link", "set", host, "up"]);
      ipOrThrow(["-n", name, "addr", "add", `${podIp}/30`, "dev", "pod0"]);
      ipOrThrow(["-n", name, "link", "set", "pod0", "up"]);
      return { podIp, hostIp };
    },
    remove: () => {
      if (removed) return;
      const left = spawnSync("ip", ["netns", "pids", name], { encoding: "utf8" }).stdout ?? "";
      for (const pid of left.split(/\s+/).filter(Boolean).map(Number)) {
        try {
          process.kill(pid, "SIGKILL");
        } catch { /* gone */ }
      }
      removed = true;
      spawnSync("ip", ["netns", "delete", name]);
    },
  };
  ipOrThrow(["-n", name, "link", "set", "lo", "up"]);
  made.add(netns);
  return netns;
}
