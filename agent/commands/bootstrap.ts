import { Buffer } from "node:buffer";
import { existsSync } from "node:fs";
import { readEnvoyConfig } from "../supervise/bootstrap-file.ts";
import { AGENT_CLUSTER, BootstrapError, deriveBootstrap } from "../envoy/bootstrap.ts";
import { statusTarget } from "../envoy/status-target.ts";
import { StartError } from "../lib/errors.ts";
import { HTTP2_TAIL_MS } from "../drain/delivery-reading.ts";
import { filterWasmBytes } from "../supervise/filter-asset.ts";
import { writeOut } from "../runtime/process.ts";

/** Options of {@linkcode printBootstrap}. */
export interface BootstrapCommandOptions {
  config: string;
  adminPort: number;
  statusAddress: string;
  statusPort: number;
  /** Insert the in-flight filter (false for `--no-filter`). */
  filter: boolean;
  /** `--filter-wasm`: a module file to reference; without it the module is carried inline. */
  filterWasm?: string;
  heartbeatMs: number;
  excludePath: string[];
  /** `--holder-paths`: the filter keeps each request's method and path to name what holds a drain. */
  holderPaths?: boolean;
}

/** Stands for the module in the derived config until it is replaced by the inline bytes. */
const INLINE_PLACEHOLDER = "lastcall:inline-filter.wasm";

/**
 * `lastcall bootstrap`: prints the effective bootstrap lastcall would run (epoch 0). The
 * filter module is carried in it (`inline_bytes`), so the output stands alone and nothing is
 * written anywhere; `--filter-wasm` references that file instead.
 *
 * @example
 * ```ts
 * process.exitCode = await printBootstrap({ config: "envoy.yaml", adminPort: 15000, statusAddress: "127.0.0.1",
 *   statusPort: 15020, filter: true, heartbeatMs: 1000, excludePath: [] });
 * ```
 * @throws {StartError} in one line: the config cannot be read or used, the module is missing,
 * the status address does not resolve
 */
export async function printBootstrap(o: BootstrapCommandOptions): Promise<number> {
  const { parsed } = await readEnvoyConfig(o.config);
  if (o.filter && o.filterWasm && !existsSync(o.filterWasm)) {
    throw new StartError(`Filter module not found: ${o.filterWasm}`);
  }
  let inline: string | undefined;
  if (o.filter && !o.filterWasm) {
    try {
      inline = Buffer.from(await filterWasmBytes()).toString("base64");
    } catch (error) {
      throw new StartError((error as Error).message);
    }
  }
  let config: Record<string, unknown>;
  try {
    ({ config } = deriveBootstrap(parsed, {
      adminPort: o.adminPort,
      // As `run` does: an IP Envoy reaches the status server at (a name resolved, a wildcard → loopback).
      statusAddress: await statusTarget(o.statusAddress),
      statusPort: o.statusPort,
      delayedCloseMs: HTTP2_TAIL_MS,
      filter: o.filter
        ? {
          wasmPath: o.filterWasm ?? INLINE_PLACEHOLDER,
          pluginConfig: {
            agent_cluster: AGENT_CLUSTER,
            heartbeat_ms: o.heartbeatMs,
            epoch: 0,
            instance: "",
            exclude_paths: o.excludePath,
            ...(o.holderPaths ? { holder_paths: true } : {}),
          },
        }
        : undefined,
    }));
  } catch (error) {
    if (!(error instanceof BootstrapError)) throw error;
    throw new StartError(`Cannot use Envoy config ${o.config}: ${error.message}`);
  }
  // JSON: what Envoy reads as YAML 1.1 could differ from what YAML 1.2 wrote (`id: n`).
  writeOut(JSON.stringify(config, inline === undefined ? undefined : inlineModule(inline), 2));
  return 0;
}

/** A JSON replacer that turns the placeholder's `{ filename }` into `{ inline_bytes }`. */
function inlineModule(base64: string): (key: string, value: unknown) => unknown {
  return (key, value) =>
    key === "local" && (value as { filename?: unknown } | null)?.filename === INLINE_PLACEHOLDER
      ? { inline_bytes: base64 }
      : value;
}
