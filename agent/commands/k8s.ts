// The Kubernetes commands: `inject` and `check` work on manifests (no cluster needed), `drain`
// is the native sidecar's preStop hook.
import type { Command } from "commander";
import { SIDECAR_DEFAULTS } from "../k8s/sidecar.ts";
import { choiceArg, durationArg, option } from "../options.ts";
import { checkCommand } from "./check.ts";
import { requestDrain } from "./drain.ts";
import { injectCommand } from "./inject.ts";

/** Adds `inject`, `check` and `drain` to the program; `run` resolves each command's exit code. */
export function addKubernetesCommands(program: Command, run: (code: Promise<number>) => void): void {
  program.command("inject")
    .description("print a manifest with the lastcall sidecar added to every pod template (Pod, Deployment, StatefulSet, DaemonSet, Job, CronJob)")
    .addOption(option("-f, --filename <file>", "the manifest (YAML, several documents allowed); - for stdin").makeOptionMandatory())
    .addOption(option("--mode <mode>", "native: init container with restartPolicy Always (Kubernetes ≥ 1.29); classic: first container with a postStart wait")
      .default(SIDECAR_DEFAULTS.mode).argParser(choiceArg(["native", "classic"] as const)))
    .addOption(option("--image <image>", "the lastcall image").default(SIDECAR_DEFAULTS.image))
    .addOption(option("--config-map <name>", "ConfigMap with envoy.yaml, mounted at /etc/envoy").default(SIDECAR_DEFAULTS.configMap))
    .exitOverride()
    .action((o) => run(injectCommand(o.filename, { mode: o.mode, image: o.image, configMap: o.configMap })));

  program.command("check")
    .description("check the termination timing of each pod template in a manifest; exit 1 with one line per finding")
    .addOption(option("-f, --filename <file>", "the manifest (YAML, several documents allowed); - for stdin").makeOptionMandatory())
    .exitOverride()
    .action((o) => run(checkCommand(o.filename)));

  program.command("drain")
    .description("ask the agent to drain without exiting (POST /drain): a native sidecar's preStop hook")
    .addOption(option("--status-url <url>", "the agent's status server").default("http://127.0.0.1:15020"))
    .addOption(option("--timeout <duration>", "give up after").default(5000, "5s").argParser(durationArg))
    .exitOverride()
    .action((o) => run(requestDrain({ statusUrl: o.statusUrl, timeoutMs: o.timeout })));
}
