// A real single-node Kubernetes for tests, all children of the test process, that leaves nothing
// behind when stopped.
import { existsSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { KT_IMAGE, KUBE_PACKAGES, kubePaths, missingArtifacts, onPath } from "../../build/kube.mjs";
import { waitFor } from "./envoy.ts";
import { type ControlPlane, startControlPlane } from "./kube-api.ts";
import { type Daemon, freePort, mustRun, runCommand, startDaemon } from "./kube-process.ts";
import { tempDir } from "./temp.ts";
import {
  BRIDGE,
  type HostState,
  readHostState,
  restoreHost,
  takeClusterLock,
} from "./kube-host.ts";

export { BRIDGE };

/** The node's address on {@linkcode BRIDGE}; the API server and the kubelet listen on it. */
export const NODE_IP = "10.246.0.1";
const POD_CIDR = "10.246.0.0/24";
const SERVICE_CIDR = "10.246.128.0/24";
/** The single node's name (the kubelet's `--hostname-override`). */
export const NODE = "lastcall-node";
const CNI_PLUGINS = ["bridge", "host-local", "loopback"];

/**
 * Why the cluster cannot start here (what is missing, how to get it), or undefined when it can.
 *
 * @example
 * const skip = kubeClusterSkipReason();
 * if (skip) it.skip(`real kubelet: ${skip}`, () => {});
 */
export function kubeClusterSkipReason(): string | undefined {
  if (process.getuid?.() !== 0) {
    return "needs root (containerd, the kubelet, a bridge and iptables rules)";
  }
  const tools = ["containerd", "ctr", "runc", "iptables", "iptables-save", "ip"].filter((t) =>
    !onPath(t)
  );
  const cni = CNI_PLUGINS.filter((p) => !existsSync(join("/usr/lib/cni", p)));
  if (tools.length || cni.length) {
    return `needs ${
      [...tools, ...cni.map((p) => `/usr/lib/cni/${p}`)].join(", ")
    }: install with \`apt-get install -y ${KUBE_PACKAGES}\``;
  }
  const missing = missingArtifacts();
  if (missing.length) {
    return `needs ${
      missing.map((m) => (m === "kt" ? "the kt pause image" : m)).join(", ")
    } in ${kubePaths().cache}: build with \`node build/kube.mjs\``;
  }
  return undefined;
}

/** A running single-node cluster. */
export interface KubeCluster
  extends Pick<ControlPlane, "kubeconfig" | "url" | "token" | "kubectl"> {
  /** Its folder (state, logs in log/*.log). */
  readonly dir: string;
  /** How long each step of the start took, in ms (for the CI budget). */
  readonly timings: Record<string, number>;
  /** Imports an image archive (docker-archive or oci-archive) into containerd's k8s.io namespace. */
  importImage(archive: string): Promise<void>;
  /** The last lines of every component's log (for a failure report). */
  logs(lines?: number): string;
  /** Stops kube-proxy and starts it again (it lists every Service and EndpointSlice anew). */
  restartKubeProxy(): Promise<void>;
  /** Tears everything down; resolves with how long it took in ms. */
  stop(): Promise<number>;
}

/**
 * Starts the cluster and resolves when the node is Ready and the `default` ServiceAccount exists
 * (about 5 s with the binaries cached, 4.0-4.5 s measured on 2 cores).
 *
 * @example
 * const cluster = await startKubeCluster();
 * await cluster.kubectl(["apply", "-f", "-"], manifest);
 * await cluster.stop();
 */
export async function startKubeCluster(): Promise<KubeCluster> {
  const reason = kubeClusterSkipReason();
  if (reason) throw new Error(`Cannot start the test cluster: ${reason}`);
  const release = await takeClusterLock();
  const started = Date.now();
  const timings: Record<string, number> = {};
  const mark = (step: string) => (timings[step] = Date.now() - started);
  const dir = tempDir("k-");
  const logDir = join(dir, "log");
  const before = await readHostState();
  const daemons: Daemon[] = [];
  let plane: ControlPlane | undefined;
  let kubeProxyArgs: string[] = [];
  const ctr = (args: string[]) =>
    mustRun("ctr", ["-a", join(dir, "containerd", "containerd.sock"), "-n", "k8s.io", ...args], {
      timeoutMs: 300_000,
    });

  let stopping: Promise<number> | undefined;
  const stop = () => (stopping ??= (async () => {
    const t0 = Date.now();
    try {
      await teardown({
        dir,
        daemons,
        plane,
        ctr,
        before,
        mark: (step) => (timings[`stop: ${step}`] = Date.now() - t0),
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
      release();
    }
    return Date.now() - t0;
  })());

  try {
    await mustRun("ip", ["link", "add", BRIDGE, "type", "bridge"]).catch(async (error) => {
      if (!(await runCommand("ip", ["link", "show", BRIDGE])).stdout) throw error;
    });
    await runCommand("ip", ["addr", "add", `${NODE_IP}/24`, "dev", BRIDGE]);
    await mustRun("ip", ["link", "set", BRIDGE, "up"]);
    writeFileSync("/proc/sys/net/ipv4/ip_forward", "1");

    writeContainerdConfig(dir);
    daemons.push(
      startDaemon(
        "containerd",
        "containerd",
        ["--config", join(dir, "containerd", "config.toml")],
        { logDir },
      ),
    );
    plane = await startControlPlane({
      dir,
      address: NODE_IP,
      serviceCidr: SERVICE_CIDR,
      // The node's name is in no DNS: logs and exec reach the kubelet at its InternalIP.
      extraArgs: ["--kubelet-preferred-address-types=InternalIP"],
    });
    daemons.unshift(...plane.daemons);
    mark("apiserver ready");
    const { bin } = kubePaths();
    const kc = `--kubeconfig=${plane.kubeconfig}`;
    daemons.push(startDaemon("kube-controller-manager", bin["kube-controller-manager"], [
      kc,
      "--bind-address=127.0.0.1",
      `--secure-port=${await freePort()}`,
      "--leader-elect=false",
      `--root-ca-file=${plane.servingCert}`,
      `--service-account-private-key-file=${plane.serviceAccountKey}`,
      "--use-service-account-credentials=false",
      "--profiling=false",
      `--cluster-cidr=${POD_CIDR}`,
      `--service-cluster-ip-range=${SERVICE_CIDR}`,
      "--controllers=*,-nodeipam",
    ], { logDir }));
    daemons.push(startDaemon("kube-scheduler", bin["kube-scheduler"], [
      kc,
      "--bind-address=127.0.0.1",
      `--secure-port=${await freePort()}`,
      "--leader-elect=false",
      "--profiling=false",
    ], { logDir }));
    await waitFor(
      () => (existsSync(join(dir, "containerd", "containerd.sock")) ? true : undefined),
      { timeoutMs: 30_000, what: "containerd's socket" },
    );
    await ctr(["images", "import", "--all-platforms", kubePaths().ktImage]);
    mark("kt image imported");

    writeKubeletConfig(dir, await freePort(), await freePort());
    daemons.push(startDaemon("kubelet", bin.kubelet, [
      `--config=${join(dir, "kubelet.yaml")}`,
      kc,
      `--root-dir=${join(dir, "kubelet")}`,
      `--hostname-override=${NODE}`,
      `--node-ip=${NODE_IP}`,
      // -v=2: "Killing container with a grace period" and the hooks, with µs timestamps, for timelines.
      "--v=2",
    ], { logDir }));
    kubeProxyArgs = [
      kc,
      "--proxy-mode=iptables",
      `--hostname-override=${NODE}`,
      `--cluster-cidr=${POD_CIDR}`,
      "--conntrack-max-per-core=0",
      "--conntrack-tcp-timeout-established=0",
      "--conntrack-tcp-timeout-close-wait=0",
      `--nodeport-addresses=${POD_CIDR}`,
      `--metrics-bind-address=127.0.0.1:${await freePort()}`,
      `--healthz-bind-address=127.0.0.1:${await freePort()}`,
    ];
    daemons.push(startDaemon("kube-proxy", bin["kube-proxy"], kubeProxyArgs, { logDir }));
    const died = Promise.race(daemons.map((d) => d.exited.then(() => d.name)));
    const ready = async () => {
      const out = await plane!.kubectl([
        "get",
        "node",
        NODE,
        "-o",
        'jsonpath={.status.conditions[?(@.type=="Ready")].status}',
      ]).catch(() => "");
      return out === "True" ? true : undefined;
    };
    await waitFor(ready, {
      timeoutMs: 90_000,
      intervalMs: 200,
      what: `node ${NODE} Ready`,
      abort: died,
    });
    mark("node Ready");
    await waitFor(
      () => plane!.kubectl(["get", "serviceaccount", "default", "-o", "name"]).then(() => true),
      { timeoutMs: 60_000, intervalMs: 200, what: "ServiceAccount default" },
    );
    mark("default ServiceAccount");
  } catch (error) {
    const logs = daemons.map((d) => `--- ${d.name}:\n${d.tail(15)}`).join("\n");
    await stop().catch(() => {});
    throw new Error(`${(error as Error).message}\n${logs}`);
  }
  return {
    url: plane.url,
    kubeconfig: plane.kubeconfig,
    token: plane.token,
    kubectl: plane.kubectl,
    dir,
    timings,
    importImage: (archive) => ctr(["images", "import", "--all-platforms", archive]).then(() => {}),
    logs: (lines = 20) => daemons.map((d) => `--- ${d.name}:\n${d.tail(lines)}`).join("\n"),
    async restartKubeProxy() {
      const i = daemons.findIndex((d) => d.name === "kube-proxy");
      await daemons[i]?.stop();
      daemons[i] = startDaemon("kube-proxy", kubePaths().bin["kube-proxy"], kubeProxyArgs, {
        logDir,
      });
    },
    stop,
  };
}

function writeContainerdConfig(dir: string): void {
  const c = join(dir, "containerd");
  mkdirSync(join(dir, "cni"), { recursive: true });
  mkdirSync(c, { recursive: true });
  // `containerd config default`, with its own paths; restrict_oom_score_adj: this kind of
  // sandbox refuses a negative oom_score_adj even to root, and every pod sandbox fails without it.
  const config = [
    "version = 2",
    `root = "${c}/root"`,
    `state = "${c}/state"`,
    "[grpc]",
    `  address = "${c}/containerd.sock"`,
    '[plugins."io.containerd.grpc.v1.cri"]',
    "  restrict_oom_score_adj = true",
    `  sandbox_image = "${KT_IMAGE}"`,
    '  stream_server_address = "127.0.0.1"',
    '[plugins."io.containerd.grpc.v1.cri".cni]',
    '  bin_dir = "/usr/lib/cni"',
    `  conf_dir = "${dir}/cni"`,
    '[plugins."io.containerd.grpc.v1.cri".containerd]',
    '  snapshotter = "overlayfs"',
    '  default_runtime_name = "runc"',
    '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]',
    '  runtime_type = "io.containerd.runc.v2"',
    '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]',
    "  SystemdCgroup = false",
    "",
  ].join("\n");
  writeFileSync(join(c, "config.toml"), config);
  writeFileSync(
    join(dir, "cni", "10-lastcall.conflist"),
    JSON.stringify({
      cniVersion: "0.4.0",
      name: "lastcall-k",
      plugins: [
        {
          type: "bridge",
          bridge: BRIDGE,
          isGateway: true,
          ipMasq: false,
          hairpinMode: true,
          ipam: {
            type: "host-local",
            dataDir: join(dir, "cni-ipam"),
            ranges: [[{ subnet: POD_CIDR, rangeStart: "10.246.0.10" }]],
            routes: [{ dst: "0.0.0.0/0" }],
          },
        },
        { type: "loopback" },
      ],
    }),
  );
}

function writeKubeletConfig(dir: string, port: number, healthzPort: number): void {
  writeFileSync(
    join(dir, "kubelet.yaml"),
    [
      "apiVersion: kubelet.config.k8s.io/v1beta1",
      "kind: KubeletConfiguration",
      // The cgroups here are v1 (failCgroupV1: false), no systemd, no swap accounting.
      "cgroupDriver: cgroupfs",
      "failCgroupV1: false",
      "failSwapOn: false",
      `containerRuntimeEndpoint: unix://${dir}/containerd/containerd.sock`,
      `address: ${NODE_IP}`,
      `port: ${port}`,
      "healthzBindAddress: 127.0.0.1",
      `healthzPort: ${healthzPort}`,
      "readOnlyPort: 0",
      "authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}",
      "authorization: {mode: AlwaysAllow}",
      "clusterDomain: cluster.local",
      "localStorageCapacityIsolation: false",
      // No image GC or disk eviction: cadvisor cannot read this machine's disk stats.
      "imageGCHighThresholdPercent: 100",
      "imageGCLowThresholdPercent: 99",
      'evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}',
      "serializeImagePulls: false",
      "",
    ].join("\n"),
  );
}

/** Pods first (the kubelet runs their preStop hooks, CNI DEL, and the shims exit), then the rest. */
async function teardown(
  state: {
    dir: string;
    daemons: Daemon[];
    plane?: ControlPlane;
    ctr: (args: string[]) => Promise<string>;
    before: HostState;
    mark: (step: string) => void;
  },
): Promise<void> {
  const { dir, daemons, plane, ctr, before, mark } = state;
  const daemon = (name: string) => daemons.find((d) => d.name === name);
  const alive = (name: string) =>
    daemon(name)?.child.exitCode === null && daemon(name)?.child.signalCode === null;
  await daemon("kube-controller-manager")?.stop(1000);
  await daemon("kube-scheduler")?.stop(1000);
  if (plane && alive("kubelet") && alive("kube-apiserver")) {
    await plane.kubectl([
      "delete",
      "pods",
      "--all",
      "--all-namespaces",
      "--grace-period=1",
      "--wait=false",
    ]).catch(() => "");
    const tasks = () => ctr(["tasks", "ls", "-q"]).then((out) => out.trim()).catch(() => "");
    await waitFor(async () => ((await tasks()) === "" ? true : undefined), {
      timeoutMs: 30_000,
      intervalMs: 200,
      what: "every pod gone",
    }).catch(() => {});
  }
  mark("pods gone");
  await daemon("kube-proxy")?.stop();
  await daemon("kubelet")?.stop();
  mark("kubelet stopped");
  if (alive("containerd")) {
    for (
      const task of (await ctr(["tasks", "ls", "-q"]).catch(() => "")).split("\n").filter(Boolean)
    ) {
      await ctr(["tasks", "kill", "-s", "SIGKILL", task]).catch(() => "");
      await ctr(["tasks", "delete", "-f", task]).catch(() => "");
    }
  }
  await daemon("containerd")?.stop();
  mark("containerd stopped");
  // Their state is thrown away: no need for a graceful end.
  await daemon("kube-apiserver")?.stop(1000);
  await daemon("etcd")?.stop(1000);
  mark("control plane stopped");
  await restoreHost(before, dir, mark);
}
