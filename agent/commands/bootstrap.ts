import { readFile } from "node:fs/promises";
import YAML from "yaml";
import { AGENT_CLUSTER, deriveBootstrap } from "../envoy/bootstrap.ts";
import { StartError } from "../errors.ts";
import { writeOut } from "../runtime/process.ts";

/** Options of {@linkcode printBootstrap}. */
export interface BootstrapCommandOptions {
  config: string;
  adminPort: number;
  statusAddress: string;
  statusPort: number;
  /** Path of the filter module to reference; undefined for `--no-filter`. */
  filterWasm?: string;
  heartbeatMs: number;
  excludePath: string[];
}

/** `lastcall bootstrap`: prints the effective bootstrap lastcall would run (epoch 0). */
export async function printBootstrap(o: BootstrapCommandOptions): Promise<number> {
  let parsed: unknown;
  try {
    parsed = YAML.parse(await readFile(o.config, "utf8"));
  } catch (error) {
    throw new StartError(`Cannot read Envoy config ${o.config}: ${(error as Error).message.split("\n")[0]}`);
  }
  const { config } = deriveBootstrap(parsed, {
    adminPort: o.adminPort,
    // As `run` does: Envoy reaches a status server bound to every address on loopback.
    statusAddress: o.statusAddress === "0.0.0.0" ? "127.0.0.1" : o.statusAddress,
    statusPort: o.statusPort,
    filter: o.filterWasm
      ? {
        wasmPath: o.filterWasm,
        pluginConfig: { agent_cluster: AGENT_CLUSTER, heartbeat_ms: o.heartbeatMs, epoch: 0, instance: "", exclude_paths: o.excludePath },
      }
      : undefined,
  });
  // JSON: what Envoy reads as YAML 1.1 could differ from what YAML 1.2 wrote (`id: n`).
  writeOut(JSON.stringify(config, null, 2));
  return 0;
}
