// A real Kubernetes API server for tests (etcd and kube-apiserver v1.34.4), and server-side
// validation of objects.
import { generateKeyPairSync, randomBytes } from "node:crypto";
import { existsSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { request } from "node:https";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import { kubePaths, missingArtifacts } from "../../build/kube.mjs";
import { waitFor } from "./envoy.ts";
import { type Daemon, freePort, runCommand, startDaemon } from "./kube-process.ts";
import { tempDir } from "./temp.ts";

/** The binaries the API server alone needs. */
const API_BINARIES = ["etcd", "kube-apiserver", "kubectl"];

/**
 * Why the API server cannot start here (what is missing and the command that builds it), or
 * undefined when it can. Needs no root: everything listens on 127.0.0.1.
 *
 * @example
 * const skip = kubeApiSkipReason();
 * if (skip) it.skip(`kube api: ${skip}`, () => {});
 */
export function kubeApiSkipReason(): string | undefined {
  const missing = missingArtifacts(API_BINARIES);
  if (missing.length === 0) return undefined;
  return `needs ${
    missing.join(", ")
  } in ${kubePaths().cache}/bin: build with \`node build/kube.mjs\``;
}

/** A running control plane (etcd + kube-apiserver). */
export interface ControlPlane {
  /** The API server's base URL, e.g. https://127.0.0.1:40123. */
  readonly url: string;
  /** A kubeconfig file for the admin token (TLS not verified: the server's cert is self-signed). */
  readonly kubeconfig: string;
  /** The admin bearer token. */
  readonly token: string;
  /** The folder with its state, certificates and logs (log/*.log). */
  readonly dir: string;
  /** The service-account signing key and the server's own certificate (for the controller-manager). */
  readonly serviceAccountKey: string;
  readonly servingCert: string;
  readonly daemons: Daemon[];
  /** Runs kubectl against it; resolves with stdout, rejects naming the command and its stderr. */
  kubectl(args: string[], input?: string): Promise<string>;
  /** Stops the API server, then etcd. */
  stop(): Promise<void>;
}

/** Options of {@linkcode startControlPlane}. */
export interface ControlPlaneOptions {
  /** Folder for state and logs (made if missing). */
  dir: string;
  /** Address the API server binds to and advertises. @default "127.0.0.1" */
  address?: string;
  /** Its port. @default a free port */
  port?: number;
  /** Service ClusterIP range. @default "10.96.0.0/24" */
  serviceCidr?: string;
  /** More kube-apiserver flags. */
  extraArgs?: string[];
}

/**
 * Starts etcd and kube-apiserver from wiped state and resolves once `/readyz` answers 200.
 *
 * @example
 * const plane = await startControlPlane({ dir: tempDir("kube-") });
 * await plane.kubectl(["get", "namespaces"]);
 * await plane.stop();
 */
export async function startControlPlane(options: ControlPlaneOptions): Promise<ControlPlane> {
  const { bin } = kubePaths();
  const dir = options.dir;
  const address = options.address ?? "127.0.0.1";
  const pki = join(dir, "pki");
  const logDir = join(dir, "log");
  rmSync(join(dir, "etcd"), { recursive: true, force: true });
  mkdirSync(pki, { recursive: true });
  const { privateKey, publicKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
  const serviceAccountKey = join(pki, "sa.key");
  writeFileSync(serviceAccountKey, privateKey.export({ type: "pkcs1", format: "pem" }));
  writeFileSync(join(pki, "sa.pub"), publicKey.export({ type: "spki", format: "pem" }));
  const token = randomBytes(16).toString("hex");
  writeFileSync(join(pki, "tokens.csv"), `${token},admin,admin,system:masters\n`);
  const [etcdClient, etcdPeer, port] = [
    await freePort(),
    await freePort(),
    options.port ?? (await freePort()),
  ];
  const url = `https://${address}:${port}`;
  const kubeconfig = join(dir, "kubeconfig");
  writeFileSync(
    kubeconfig,
    [
      "apiVersion: v1",
      "kind: Config",
      `clusters: [{name: local, cluster: {server: "${url}", insecure-skip-tls-verify: true}}]`,
      `users: [{name: admin, user: {token: "${token}"}}]`,
      "contexts: [{name: local, context: {cluster: local, user: admin}}]",
      "current-context: local",
      "",
    ].join("\n"),
  );

  const etcd = startDaemon("etcd", bin.etcd, [
    "--name",
    "default",
    "--data-dir",
    join(dir, "etcd"),
    "--unsafe-no-fsync",
    "--log-level",
    "warn",
    "--listen-client-urls",
    `http://127.0.0.1:${etcdClient}`,
    "--advertise-client-urls",
    `http://127.0.0.1:${etcdClient}`,
    "--listen-peer-urls",
    `http://127.0.0.1:${etcdPeer}`,
    "--initial-advertise-peer-urls",
    `http://127.0.0.1:${etcdPeer}`,
    "--initial-cluster",
    `default=http://127.0.0.1:${etcdPeer}`,
    "--listen-metrics-urls",
    "",
  ], { logDir });
  const apiserver = startDaemon("kube-apiserver", bin["kube-apiserver"], [
    `--etcd-servers=http://127.0.0.1:${etcdClient}`,
    `--bind-address=${address}`,
    `--advertise-address=${address}`,
    `--secure-port=${port}`,
    `--cert-dir=${pki}`,
    `--token-auth-file=${join(pki, "tokens.csv")}`,
    "--authorization-mode=AlwaysAllow",
    "--allow-privileged=true",
    `--service-cluster-ip-range=${options.serviceCidr ?? "10.96.0.0/24"}`,
    "--service-account-issuer=https://kubernetes.default.svc",
    `--service-account-key-file=${join(pki, "sa.pub")}`,
    `--service-account-signing-key-file=${serviceAccountKey}`,
    "--profiling=false",
    "--enable-priority-and-fairness=false",
    ...(options.extraArgs ?? []),
  ], { logDir });
  const daemons = [etcd, apiserver];
  const stop = async () => {
    await apiserver.stop();
    await etcd.stop();
  };
  const died = Promise.race(daemons.map((d) => d.exited.then(() => d)));
  try {
    await waitFor(
      async () => ((await httpsStatus(`${url}/readyz`, token)) === 200 ? true : undefined),
      {
        timeoutMs: 60_000,
        intervalMs: 100,
        what: `kube-apiserver ${url}/readyz`,
        abort: died,
      },
    );
  } catch (error) {
    await stop();
    throw new Error(
      `${(error as Error).message}\n--- kube-apiserver:\n${apiserver.tail()}\n--- etcd:\n${
        etcd.tail(10)
      }`,
    );
  }
  const cacheDir = join(dir, "kubectl-cache");
  const kubectl = async (args: string[], input?: string) => {
    const result = await runCommand(bin.kubectl, [
      `--kubeconfig=${kubeconfig}`,
      `--cache-dir=${cacheDir}`,
      ...args,
    ], { input });
    if (result.code !== 0) {
      throw new Error(
        `kubectl ${args.join(" ")} failed (exit ${result.code}): ${result.stderr.trim()}`,
      );
    }
    return result.stdout;
  };
  return {
    url,
    kubeconfig,
    token,
    dir,
    serviceAccountKey,
    servingCert: join(pki, "apiserver.crt"),
    daemons,
    kubectl,
    stop,
  };
}

/** GET over TLS without verifying the (self-signed) certificate: loopback or the test's own bridge only. */
function httpsStatus(url: string, token: string): Promise<number> {
  return new Promise((done, fail) => {
    const req = request(url, {
      rejectUnauthorized: false,
      headers: { authorization: `Bearer ${token}` },
      timeout: 2000,
    }, (res) => {
      res.resume();
      done(res.statusCode ?? 0);
    });
    req.once("timeout", () => req.destroy(new Error(`${url}: no answer in 2 s`)));
    req.once("error", fail);
    req.end();
  });
}

/** An API server for validating manifests. */
export interface KubeApi {
  readonly url: string;
  readonly kubeconfig: string;
  /**
   * The API server's verdict on every document of a YAML stream (or JSON): a server-side dry-run
   * create with strict field validation, one document at a time. Resolves with one line per
   * rejected document, `<Kind>/<name>: <the server's message>` (empty when all are accepted). A
   * kind this server has no API for (a custom resource) comes back as a line with
   * `no matches for kind "<Kind>"`. Documents are sent as written (YAML 1.1 numbers such as
   * `0644` mean what they mean to kubectl). Namespaces need not exist; a Pod's service account
   * need not exist (those admission plugins are off).
   */
  validate(yamlOrJsonText: string): Promise<string[]>;
  /** Runs kubectl; resolves with stdout, rejects naming the command and its stderr. */
  kubectl(args: string[], input?: string): Promise<string>;
  /** Stops etcd and the API server and removes the temp folder. */
  stop(): Promise<void>;
}

/**
 * Starts etcd and kube-apiserver only (no node), for {@linkcode KubeApi.validate}. About 3-5 s.
 *
 * @example
 * const api = await startKubeApi();
 * expect(await api.validate(readFileSync("deployment.yaml", "utf8"))).toEqual([]);
 * await api.stop();
 */
export async function startKubeApi(): Promise<KubeApi> {
  const reason = kubeApiSkipReason();
  if (reason) throw new Error(`Cannot start kube-apiserver: ${reason}`);
  const dir = tempDir("kapi-");
  const plane = await startControlPlane({
    dir,
    // A validator: no Endpoints for a loopback address, no lookups of namespaces or service accounts.
    extraArgs: [
      "--endpoint-reconciler-type=none",
      "--disable-admission-plugins=ServiceAccount,NamespaceLifecycle",
    ],
  }).catch((error) => {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  });
  return {
    url: plane.url,
    kubeconfig: plane.kubeconfig,
    kubectl: plane.kubectl,
    validate: (text) => validateDocuments(plane, text),
    async stop() {
      await plane.stop();
      if (existsSync(dir)) rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function validateDocuments(plane: ControlPlane, text: string): Promise<string[]> {
  const documents = parseAllDocuments(text);
  const list = Array.isArray(documents) ? documents : [];
  const checks = list.map((doc, i) => async (): Promise<string | undefined> => {
    if (doc.errors.length > 0) {
      return `document ${i + 1}: not YAML: ${doc.errors[0].message.split("\n")[0]}`;
    }
    const value = doc.toJS() as { kind?: string; metadata?: { name?: string } } | null;
    if (value === null || value === undefined) return undefined;
    const label = `${value.kind ?? `document ${i + 1}`}/${value.metadata?.name ?? "?"}`;
    const source = text.slice(doc.range[0], doc.range[2]);
    try {
      await plane.kubectl([
        "create",
        "--dry-run=server",
        "--validate=strict",
        "-o",
        "name",
        "-f",
        "-",
      ], source);
      return undefined;
    } catch (error) {
      const message = (error as Error).message.replace(/^kubectl [^:]*failed \(exit \d+\): /, "");
      return `${label}: ${message.split("\n").map((l) => l.trim()).filter(Boolean).join("; ")}`;
    }
  });
  const results: Array<string | undefined> = new Array(checks.length);
  let next = 0;
  const worker = async () => {
    while (next < checks.length) {
      const i = next++;
      results[i] = await checks[i]();
    }
  };
  await Promise.all(Array.from({ length: Math.min(4, checks.length) }, worker));
  return results.filter((r): r is string => r !== undefined);
}
