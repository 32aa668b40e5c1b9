// The test's xDS control plane: the Go program beside this file (go-control-plane's snapshot
// cache) built once into .cache/xds-server/, run as a child process and driven over its HTTP
// control endpoint on loopback.
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { root } from "../paths.ts";

const source = join(root, "test/support/xds-server");
const cacheDir = join(root, ".cache/xds-server");

/** Builds the server when its sources changed (quiet; the Go build cache makes repeats fast). */
export function buildXdsServer(): string {
  const hash = createHash("sha256");
  for (const file of ["main.go", "go.mod", "go.sum"]) hash.update(readFileSync(join(source, file)));
  const binary = join(cacheDir, `xds-server-${hash.digest("hex").slice(0, 12)}`);
  if (existsSync(binary)) return binary;
  try {
    execFileSync("go", ["version"], { stdio: "ignore" });
  } catch {
    throw new Error(
      "The xDS tests need Go (https://go.dev) on PATH to build test/support/xds-server: `go` was not found",
    );
  }
  mkdirSync(cacheDir, { recursive: true });
  const temporary = `${binary}.${process.pid}.tmp`;
  try {
    execFileSync("go", ["build", "-o", temporary, "."], {
      cwd: source,
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, CGO_ENABLED: "0" },
    });
  } catch (error) {
    const e = error as { stderr?: Buffer; message: string };
    throw new Error(
      `Building test/support/xds-server failed: ${e.stderr?.toString() || e.message}`,
    );
  }
  renameSync(temporary, binary);
  return binary;
}

/** Envoy resources in JSON, as the control plane serves them. */
export interface Snapshot {
  version: string;
  listeners?: unknown[];
  routes?: unknown[];
  clusters?: unknown[];
  /** Adds field 9999 to each listener, filter chain, filter and HTTP connection manager. */
  unknown_fields?: boolean;
}

/** A request the control plane received (an ACK, or a NACK with `error`). */
export interface SeenRequest {
  stream: number;
  delta: boolean;
  type_url: string;
  version_info?: string;
  response_nonce?: string;
  resource_names?: string[];
  error?: string;
  node?: string;
}

/** Options of {@linkcode startXdsServer}. */
export interface XdsServerOptions {
  /** gRPC port. @default 0 (any) */
  port?: number;
  /** Serve TLS; with `clientCa`, require client certificates. */
  tls?: { cert: string; key: string; clientCa?: string };
}

/** A running control plane. */
export interface XdsServer {
  readonly port: number;
  push(snapshot: Snapshot): Promise<void>;
  requests(): Promise<SeenRequest[]>;
  streams(): Promise<number>;
  /** SIGKILL: every stream breaks, as when a control plane's pod dies. */
  kill(): Promise<void>;
  output(): string;
}

const running = new Set<XdsServer>();

/**
 * Starts the control plane on loopback.
 *
 * @example
 * ```ts
 * const cp = await startXdsServer();
 * await cp.push({ version: "1", listeners: [listener], routes: [route], clusters: [cluster] });
 * ```
 */
export async function startXdsServer(options: XdsServerOptions = {}): Promise<XdsServer> {
  const binary = buildXdsServer();
  const args = ["-xds-address", `127.0.0.1:${options.port ?? 0}`];
  if (options.tls) {
    args.push("-tls-cert", options.tls.cert, "-tls-key", options.tls.key);
    if (options.tls.clientCa) args.push("-client-ca", options.tls.clientCa);
  }
  const child: ChildProcess = spawn(binary, args, { stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  child.stderr!.on("data", (chunk) => (output += String(chunk)));
  const exited = new Promise<void>((done) => child.once("exit", () => done()));
  const ports = await new Promise<{ xds_port: number; control_port: number }>((done, fail) => {
    const lines = createInterface({ input: child.stdout! });
    lines.once("line", (line) => done(JSON.parse(line)));
    child.once("exit", (code) => fail(new Error(`xds-server exited with ${code}: ${output}`)));
  });
  const control = `http://127.0.0.1:${ports.control_port}`;
  const server: XdsServer = {
    port: ports.xds_port,
    async push(snapshot) {
      const response = await fetch(`${control}/snapshot`, {
        method: "POST",
        body: JSON.stringify(snapshot),
      });
      if (response.status !== 204) {
        throw new Error(
          `xds-server refused the snapshot: ${response.status} ${await response.text()}`,
        );
      }
    },
    requests: async () =>
      (await fetch(`${control}/requests`).then((r) => r.json())) as SeenRequest[],
    streams: async () =>
      ((await fetch(`${control}/streams`).then((r) => r.json())) as { streams: number }).streams,
    async kill() {
      child.kill("SIGKILL");
      await exited;
      running.delete(server);
    },
    output: () => output,
  };
  running.add(server);
  return server;
}

/** Kills every control plane a test file started (for afterEach). */
export async function stopAllXdsServers(): Promise<void> {
  await Promise.all([...running].map((s) => s.kill()));
}

/** Writes a CA, a server certificate for 127.0.0.1 and a client certificate (openssl). */
export function makeCertificates(
  dir: string,
): { ca: string; serverCert: string; serverKey: string; clientCert: string; clientKey: string } {
  const run = (...args: string[]) =>
    execFileSync("openssl", args, { cwd: dir, stdio: ["ignore", "pipe", "pipe"] });
  run(
    "req",
    "-x509",
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
    "-days",
    "2",
    "-subj",
    "/CN=lastcall test CA",
    "-keyout",
    "ca.key",
    "-out",
    "ca.crt",
  );
  for (
    const [name, san] of [["server", "IP:127.0.0.1,DNS:xds.test"], [
      "client",
      "URI:spiffe://test/envoy",
    ]]
  ) {
    run(
      "req",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:prime256v1",
      "-nodes",
      "-subj",
      `/CN=${name}`,
      "-keyout",
      `${name}.key`,
      "-out",
      `${name}.csr`,
    );
    writeFileSync(join(dir, `${name}.ext`), `subjectAltName=${san}\n`);
    run(
      "x509",
      "-req",
      "-in",
      `${name}.csr`,
      "-CA",
      "ca.crt",
      "-CAkey",
      "ca.key",
      "-CAcreateserial",
      "-days",
      "2",
      "-extfile",
      `${name}.ext`,
      "-out",
      `${name}.crt`,
    );
  }
  return {
    ca: join(dir, "ca.crt"),
    serverCert: join(dir, "server.crt"),
    serverKey: join(dir, "server.key"),
    clientCert: join(dir, "client.crt"),
    clientKey: join(dir, "client.key"),
  };
}
