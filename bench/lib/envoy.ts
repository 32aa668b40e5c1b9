// An Envoy started by a benchmark (not by an agent): admin over TCP or a Unix socket, listener
// ports discovered from the admin, stopped by signal.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Child, envoyBinary, start, until } from "./context.ts";
import type { AdminAddress } from "./bootstrap.ts";

/** An admin endpoint: `http://127.0.0.1:<port>` or a Unix socket path. */
export type Admin = { url: string } | { socketPath: string };

/** GET or POST on Envoy's admin; resolves with status, body and the time it took. */
export function adminCall(
  admin: Admin,
  path: string,
  options: { method?: string; timeoutMs?: number } = {},
): Promise<{ status: number; body: string; ms: number }> {
  const began = performance.now();
  return new Promise((done, fail) => {
    const target = "url" in admin
      ? { ...urlParts(admin.url), path }
      : { socketPath: admin.socketPath, path };
    const req = request({
      ...target,
      method: options.method ?? "GET",
      agent: false,
      timeout: options.timeoutMs ?? 10_000,
    }, (res) => {
      let body = "";
      res.setEncoding("utf8").on("data", (chunk: string) => {
        body += chunk;
      }).on("end", () => {
        done({ status: res.statusCode ?? 0, body, ms: performance.now() - began });
      }).on("error", fail);
    });
    req.on("timeout", () => req.destroy(new Error(`admin ${path} timed out`)));
    req.on("error", fail);
    req.end();
  });
}

function urlParts(url: string): { host: string; port: number } {
  const parsed = new URL(url);
  return { host: parsed.hostname, port: Number(parsed.port) };
}

/** Port of a named listener, from `/listeners?format=json`. */
export async function listenerPort(admin: Admin, name = "ingress"): Promise<number> {
  const body = JSON.parse((await adminCall(admin, "/listeners?format=json")).body) as {
    listener_statuses?: {
      name: string;
      local_address?: { socket_address?: { port_value?: number } };
    }[];
  };
  const port = body.listener_statuses?.find((l) => l.name === name)?.local_address?.socket_address
    ?.port_value;
  if (!port) throw new Error(`Envoy has no listener named ${name}`);
  return port;
}

/** Resolves once `/ready` answers 200. */
export async function untilReady(admin: Admin, what: string, timeoutMs = 30_000): Promise<void> {
  await until(
    async () => ((await adminCall(admin, "/ready", { timeoutMs: 2000 })).status === 200
      ? true
      : undefined),
    `${what} /ready`,
    timeoutMs,
  );
}

/** A running benchmark Envoy. */
export interface BenchEnvoy {
  readonly child: Child;
  readonly admin: Admin;
  /** Port of the `ingress` listener. */
  readonly port: number;
  /** SIGTERM, SIGKILL after 5 s; removes its folder. */
  stop(): Promise<void>;
}

/** Options of {@linkcode startBenchEnvoy}. */
export interface StartBenchEnvoyOptions {
  /** `--concurrency`. @default 2 */
  concurrency?: number;
  /** Extra arguments. @default [] */
  args?: string[];
}

/**
 * Starts Envoy with `bootstrap(admin)`: admin on a free TCP port (or on a Unix socket in its own
 * folder with `pipe`), then waits for `/ready`.
 */
export async function startBenchEnvoy(
  bootstrap: (admin: AdminAddress, dir: string) => Record<string, unknown>,
  options: StartBenchEnvoyOptions & { pipe?: boolean } = {},
): Promise<BenchEnvoy> {
  const dir = mkdtempSync(join(tmpdir(), "lcperf-envoy-"));
  const address: AdminAddress = options.pipe ? { pipe: join(dir, "admin.sock") } : { port: 0 };
  const config = bootstrap(address, dir);
  writeFileSync(join(dir, "envoy.json"), JSON.stringify(config));
  const addressFile = join(dir, "admin-address");
  const child = start(envoyBinary(), [
    "-c",
    join(dir, "envoy.json"),
    "--concurrency",
    String(options.concurrency ?? 2),
    "--admin-address-path",
    addressFile,
    "--disable-hot-restart",
    "--local-address-ip-version",
    "v4",
    "-l",
    "warning",
    ...(options.args ?? []),
  ]);
  const died = child.exited.then(() => {
    throw new Error(`Envoy exited early:\n${child.output().slice(-3000)}`);
  });
  died.catch(() => {});
  const stop = async () => {
    child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
    await child.exited;
    clearTimeout(timer);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    let admin: Admin;
    if ("pipe" in address) {
      admin = { socketPath: address.pipe };
    } else {
      const text = await Promise.race([
        until(() => {
          try {
            return readFileSync(addressFile, "utf8").trim() || undefined;
          } catch {
            return undefined;
          }
        }, "Envoy's admin address"),
        died,
      ]);
      admin = { url: `http://${text}` };
    }
    await Promise.race([untilReady(admin, "Envoy"), died]);
    const port = await listenerPort(admin);
    return { child, admin, port, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}
