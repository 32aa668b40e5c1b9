// The effective bootstrap of one Envoy process, from the user's config file to a validated JSON
// file: read, derive (envoy/bootstrap.ts), write, `envoy --mode validate`.
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import YAML from "yaml";
import { StartError } from "./errors.ts";
import { AGENT_CLUSTER, type Bootstrap, deriveBootstrap } from "./envoy/bootstrap.ts";
import { validateConfig } from "./envoy/validate.ts";
import type { RunOptions } from "./options.ts";
import type { XdsRedirectOptions } from "./xds/redirect.ts";
import { reportTimeoutMs } from "./reports.ts";

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
 * Reads the user's config and derives, writes and validates the bootstrap. It is written as
 * JSON: Envoy reads YAML as YAML 1.1 (`id: n` would become false), JSON means one thing.
 *
 * @throws {StartError} naming the file and Envoy's own lines when the config cannot be used
 */
export async function prepareBootstrap(envoyBinary: string, o: RunOptions, request: BootstrapRequest): Promise<PreparedBootstrap> {
  let text: string;
  let parsed: unknown;
  try {
    text = await readFile(o.config, "utf8");
    parsed = YAML.parse(text);
  } catch (error) {
    throw new StartError(`Cannot read Envoy config ${o.config}: ${(error as Error).message.split("\n")[0]}`);
  }
  let bootstrap: Bootstrap;
  try {
    bootstrap = deriveBootstrap(parsed, {
      adminPort: o.adminPort,
      adminSocket: o.adminSocket,
      statusAddress: o.statusAddress === "0.0.0.0" ? "127.0.0.1" : o.statusAddress,
      statusPort: request.statusPort,
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
          },
        }
        : undefined,
      xds: request.xds,
    });
  } catch (error) {
    throw new StartError(`Cannot use Envoy config ${o.config}: ${(error as Error).message}`);
  }
  const path = join(request.runDir, `${request.name}.json`);
  // The file holds the report token: readable by lastcall's user only.
  await writeFile(path, JSON.stringify(bootstrap.config, null, 1), { mode: 0o600 });
  const validation = await validateConfig(envoyBinary, path, request.signal);
  if (!validation.ok) throw new StartError(`Envoy rejected config ${o.config}`, validation.errors);
  return { path, bootstrap, text };
}
