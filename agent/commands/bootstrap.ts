import { readFile } from "node:fs/promises";
import YAML from "yaml";
import { AGENT_CLUSTER, deriveBootstrap } from "../envoy/bootstrap.ts";
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
  const parsed = YAML.parse(await readFile(o.config, "utf8"));
  const { config } = deriveBootstrap(parsed, {
    adminPort: o.adminPort,
    statusAddress: o.statusAddress,
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
