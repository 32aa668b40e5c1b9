// The effective bootstrap of one Envoy process, from the user's config file to a validated JSON
// file: read, derive (envoy/bootstrap.ts), write, `envoy --mode validate`.
import { open } from "node:fs/promises";
import { constants, type Stats } from "node:fs";
import { join } from "node:path";
import YAML from "yaml";
import { StartError } from "../lib/errors.ts";
import {
  AGENT_CLUSTER,
  type Bootstrap,
  deriveBootstrap,
  reportTimeoutMs,
} from "../envoy/bootstrap.ts";
import { setIdlePressure } from "../envoy/idle-close.ts";
import { statusTarget } from "../envoy/status-target.ts";
import { validateConfig } from "../envoy/validate.ts";
import type { RunOptions } from "../options.ts";
import type { XdsRedirectOptions } from "../xds/redirect.ts";
import { writePrivateFile } from "./run-dir.ts";
import { HTTP2_TAIL_MS } from "../drain/delivery-reading.ts";

/** What one bootstrap is for. */
export interface BootstrapRequest {
  /** Folder the file is written to. */
  runDir: string;
  /** Name of the file, without extension, e.g. `envoy-g1-epoch0`. */
  name: string;
  epoch: number;
  /** The id the filter of this Envoy reports under. */
  instance: string;
  statusPort: number;
  /** The filter module, or undefined without the filter. */
  filterWasm?: string;
  /** Secret the filter sends with its reports. */
  reportToken: string;
  signal?: AbortSignal;
  /** Where this Envoy's xDS proxy serves (agent/xds/), to redirect LDS there. */
  xds?: XdsRedirectOptions;
}

/** A written and validated bootstrap. */
export interface PreparedBootstrap {
  path: string;
  bootstrap: Bootstrap;
  /** The user's config text it was derived from (a change refills the restart budget). */
  text: string;
}

/**
 * How the user's Envoy config is read: `<<` merge keys honoured (Envoy users write YAML 1.1),
 * and at most this many alias expansions (yaml's default): more is an alias bomb.
 */
const ENVOY_CONFIG_YAML = { merge: true, maxAliasCount: 100 } as const;

/**
 * Reads and parses the user's Envoy config (YAML or JSON).
 *
 * @example
 * ```ts
 * const { text, parsed } = await readEnvoyConfig("/etc/envoy/envoy.yaml");
 * ```
 * @throws {StartError} in one line naming the file: unreadable, not a regular file, not YAML,
 * or an alias bomb
 */
export async function readEnvoyConfig(path: string): Promise<{ text: string; parsed: unknown }> {
  try {
    const text = await readRegularFile(path);
    return { text, parsed: YAML.parse(text, ENVOY_CONFIG_YAML) };
  } catch (error) {
    const message = (error as Error).message.split("\n")[0];
    const why = /alias count/i.test(message)
      ? `more than ${ENVOY_CONFIG_YAML.maxAliasCount} alias expansions (an alias bomb?): refused`
      : message;
    throw new StartError(`Cannot read Envoy config ${path}: ${why}`);
  }
}

/**
 * Reads a regular file. Opened non-blocking, so a FIFO no one writes to is refused rather than
 * waited for (a blocked read holds even the exit on SIGTERM); a device may never end; and every
 * reload reads the config again.
 */
async function readRegularFile(path: string): Promise<string> {
  const file = await open(path, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    const kind = fileKind(await file.stat());
    if (kind !== "file") {
      throw new Error(`${kind}, not a regular file: lastcall reads its config again on reloads`);
    }
    return await file.readFile("utf8");
  } finally {
    await file.close();
  }
}

/** What is at a path, in the words of an error message. */
function fileKind(info: Stats): string {
  if (info.isFile()) return "file";
  if (info.isDirectory()) return "a folder";
  if (info.isFIFO()) return "a FIFO (named pipe)";
  if (info.isSocket()) return "a socket";
  return "a device";
}

/**
 * Reads the user's config and derives, writes and validates the bootstrap. It is written as
 * JSON: Envoy reads YAML as YAML 1.1 (`id: n` would become false), JSON means one thing.
 *
 * @example
 * ```ts
 * const prepared = await prepareBootstrap("/usr/bin/envoy", options, request);
 * ```
 * @throws {StartError} naming the file and Envoy's own lines when the config cannot be used
 */
export async function prepareBootstrap(
  envoyBinary: string,
  o: RunOptions,
  request: BootstrapRequest,
): Promise<PreparedBootstrap> {
  const written = await writeBootstrap(o, request);
  await checkBootstrap(envoyBinary, o, written.path, request.signal);
  return written;
}

/**
 * Runs `envoy --mode validate` on a written bootstrap.
 *
 * @example
 * ```ts
 * await checkBootstrap("/usr/bin/envoy", options, "/run/lastcall/envoy-g1-epoch0.json");
 * ```
 * @throws {StartError} naming the user's config and quoting Envoy's own lines when it is refused
 */
export async function checkBootstrap(
  envoyBinary: string,
  o: RunOptions,
  path: string,
  signal?: AbortSignal,
): Promise<void> {
  const validation = await validateConfig(envoyBinary, path, signal, o.envoyArgs);
  if (validation.ok) return;
  // Refused with the arguments after `--`: without them, which of the two it was.
  const alone = o.envoyArgs.length ? await validateConfig(envoyBinary, path, signal) : validation;
  if (alone.ok) {
    const args = o.envoyArgs.join(" ");
    throw new StartError(`Envoy refused the arguments after --: ${args}`, validation.errors);
  }
  throw new StartError(`Envoy rejected config ${o.config}`, alone.errors);
}

/**
 * Reads the user's config, derives the bootstrap and writes it, not yet validated
 * ({@linkcode checkBootstrap}).
 *
 * @example
 * ```ts
 * const written = await writeBootstrap(options, request);
 * ```
 * @throws {StartError} in one line naming the file when the config cannot be read or derived
 */
export async function writeBootstrap(
  o: RunOptions,
  request: BootstrapRequest,
): Promise<PreparedBootstrap> {
  const { text, parsed } = await readEnvoyConfig(o.config);
  const statusAddress = await statusTarget(o.statusAddress);
  let bootstrap: Bootstrap;
  try {
    bootstrap = deriveBootstrap(parsed, {
      adminPort: o.adminPort,
      adminSocket: o.adminSocket,
      statusAddress,
      statusPort: request.statusPort,
      delayedCloseMs: HTTP2_TAIL_MS,
      filter: request.filterWasm
        ? {
          wasmPath: request.filterWasm,
          pluginConfig: {
            agent_cluster: AGENT_CLUSTER,
            heartbeat_ms: o.heartbeatMs,
            push_timeout_ms: reportTimeoutMs(o.heartbeatMs),
            epoch: request.epoch,
            instance: request.instance,
            exclude_paths: o.excludePath,
            token: request.reportToken,
            // Only when asked: each request's method and path are then read at its headers.
            ...(o.holderPaths ? { holder_paths: true } : {}),
          },
        }
        : undefined,
      xds: request.xds,
      idlePressureFile: join(request.runDir, `${request.name}.idle`),
    });
  } catch (error) {
    throw new StartError(`Cannot use Envoy config ${o.config}: ${(error as Error).message}`);
  }
  const path = join(request.runDir, `${request.name}.json`);
  // The file holds the report token: readable by lastcall's user only.
  await writePrivateFile(path, JSON.stringify(bootstrap.config, null, 1));
  const idle = bootstrap.idleClose;
  if (idle && "file" in idle) await setIdlePressure(idle.file, 0);
  return { path, bootstrap, text };
}
