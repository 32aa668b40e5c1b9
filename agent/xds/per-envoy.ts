// What envoys.ts needs to give one Envoy process its own xDS proxy: where it serves, and the
// proxy started with a reporter callback.
import { randomBytes } from "node:crypto";
import { mkdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import type { EventLog } from "../lib/log.ts";
import { loadXdsProxy } from "./load-proxy.ts";
import type { XdsProxy } from "./proxy.ts";
import type { XdsPlan, XdsRedirectOptions } from "./redirect.ts";
import type { XdsStats } from "./stats.ts";

/** A Unix socket path must fit in `sockaddr_un` (108 bytes with the final NUL). */
const MAX_SOCKET_PATH = 100;

/** What the agent gives Envoys for its xDS proxies. */
export interface XdsHooks {
  log: EventLog;
  /** A filter variant was inserted into a listener of this Envoy: its reports are now expected. */
  onReporter(id: string): void;
}

/** Prefix of the private folder of a socket whose path in the run folder would be too long. */
const OWN_FOLDER_PREFIX = "lastcall-xds-";

/** The socket's own folder in the temp folder, when it has one (see xdsRedirectFor). */
function ownFolderOf(socketPath: string): string | undefined {
  const folder = dirname(socketPath);
  return dirname(folder) === tmpdir() && basename(folder).startsWith(OWN_FOLDER_PREFIX)
    ? folder
    : undefined;
}

/**
 * Where the proxy of the Envoy process `name` serves: a socket and files in the run folder
 * (or, when that path is too long for a socket, a private folder in the system's temp folder,
 * named here and made only when a proxy serves there: an Envoy without LDS, or one that never
 * starts, leaves nothing behind).
 */
export function xdsRedirectFor(runDir: string, name: string): XdsRedirectOptions {
  let socketPath = join(runDir, `${name}.xds.sock`);
  if (socketPath.length > MAX_SOCKET_PATH) {
    socketPath = join(
      tmpdir(),
      `${OWN_FOLDER_PREFIX}${randomBytes(6).toString("hex")}`,
      "xds.sock",
    );
  }
  return {
    socketPath,
    token: randomBytes(16).toString("hex"),
    fileBase: join(runDir, `${name}-lds`),
  };
}

/**
 * Starts the proxy of one Envoy process; each filter variant it inserts adds that process's
 * reporter id to `reporters` (once) and tells the agent.
 */
export async function startProxyFor(
  plan: XdsPlan,
  stats: XdsStats,
  hooks: XdsHooks,
  ids: { http: string; tcp: string },
  reporters: string[],
): Promise<XdsProxy> {
  const { startXdsProxy } = await loadXdsProxy();
  const ownFolder = ownFolderOf(plan.socketPath);
  // Made now, 0700, and never one already there (mkdir fails on an existing name).
  if (ownFolder) await mkdir(ownFolder, { mode: 0o700 });
  const proxy = await startXdsProxy({
    plan,
    stats,
    log: hooks.log,
    onFilter(variant) {
      const id = ids[variant];
      if (reporters.includes(id)) return;
      reporters.push(id);
      hooks.onReporter(id);
    },
  }).catch(async (error) => {
    if (ownFolder) await rm(ownFolder, { recursive: true, force: true });
    throw error;
  });
  return {
    async close() {
      await proxy.close();
      if (ownFolder) await rm(ownFolder, { recursive: true, force: true });
    },
  };
}
