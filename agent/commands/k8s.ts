// The Kubernetes commands: `inject` and `check` work on manifests (no cluster needed), `drain`
// is the native sidecar's preStop hook.
import { type Command, InvalidArgumentError } from "commander";
import { HOLD_APP_CHOICES } from "../k8s/hold.ts";
import { SIDECAR_DEFAULTS } from "../k8s/sidecar.ts";
import { choiceArg, durationArg, option } from "../options.ts";
import { checkCommand } from "./check.ts";
import { requestDrain } from "./drain.ts";
import { injectCommand } from "./inject.ts";
import { statusUrlOption } from "./status.ts";

/** Adds `inject`, `check` and `drain` to the program; `run` resolves each command's exit code. */
export function addKubernetesCommands(
  program: Command,
  run: (code: Promise<number>) => void,
): void {
  program.command("inject")
    .description(
      "print a manifest (YAML or JSON) with the lastcall sidecar added to every pod template (Pod, Deployment, StatefulSet, DaemonSet, Job, CronJob, and those in a List), wired: for each app containerPort P, Envoy listens on P+10000 (−10000 above 55535; the next free port when taken) and forwards to 127.0.0.1:P; that config is a new ConfigMap <workload>-lastcall-envoy after the workload; the app port's name moves to Envoy's port (the app's becomes <name>-app, its probes follow), so Services naming it reach Envoy; native: an app's plain HTTP readiness probe goes to Envoy's listener instead, and then the sidecar has no readiness probe of its own; the manifest's Services that select the pod get numeric targetPorts moved to the listener (one line each on stderr), and one still reaching the app is a warning. Every app container without a preStop gets one, httpGet /v1/app-stop on lastcall's status port: its SIGTERM waits until nothing is in flight to it after endpoint removal (about 1 s on a liveness restart). A pod with another proxy, hostNetwork, or no containerPort (without --config-map), and two objects of one kind and name, are refused (exit 1, left as is); annotation lastcall/inject: \"false\" skips a workload",
    )
    .addOption(
      option("-f, --filename <file>", "the manifest (YAML, several documents allowed); - for stdin")
        .makeOptionMandatory(),
    )
    .addOption(
      option(
        "--mode <mode>",
        "native: init container with restartPolicy Always (Kubernetes ≥ 1.29), stopped after the app; classic: a container after the apps (first when held), stopped beside them",
      )
        .default(SIDECAR_DEFAULTS.mode).argParser(choiceArg(["native", "classic"] as const)),
    )
    .addOption(
      option("--image <image>", "the lastcall image").default(SIDECAR_DEFAULTS.image)
        .argParser(imageArg),
    )
    .addOption(
      option(
        "--config-map <name>",
        "your ConfigMap with envoy.yaml (your listeners), mounted at /etc/envoy instead of the generated one; also used when the manifest holds a ConfigMap named <workload>-lastcall-envoy; never overwritten",
      ).argParser(configMapArg),
    )
    .addOption(
      option(
        "--host-network",
        "also inject pods with hostNetwork: true (their sidecar takes the node's ports)",
      ),
    )
    .addOption(
      option(
        "--hold-app <when>",
        "start the app only once Envoy is ready (native: the sidecar's startupProbe; classic: its postStart `lastcall wait` and `lastcall exec` around the app). auto: only where the Envoy config may carry the app's calls out (a --config-map or ConfigMap inject cannot show to be inbound only; said on stderr once per pod), not for the generated inbound-only config: there the app starts beside the sidecar",
      )
        .default("auto").argParser(choiceArg(HOLD_APP_CHOICES)),
    )
    .exitOverride()
    .action((o) =>
      run(
        injectCommand(o.filename, {
          mode: o.mode,
          image: o.image,
          configMap: o.configMap,
          hostNetwork: o.hostNetwork === true,
          holdApp: o.holdApp,
        }),
      )
    );

  program.command("check")
    .description(
      'check the termination timing of each pod template in a manifest (also in a List): one line per finding, a line where no proxy was found or its timing is not modelled, then "N workloads, M proxies, K findings"; exit 1 when there is a finding',
    )
    .addOption(
      option("-f, --filename <file>", "the manifest (YAML, several documents allowed); - for stdin")
        .makeOptionMandatory(),
    )
    .exitOverride()
    .action((o) => run(checkCommand(o.filename)));

  program.command("drain")
    .description(
      "ask the agent to drain without exiting (POST /drain): a native sidecar's preStop hook (inject's sends SIGUSR2 instead where lastcall is the container's PID 1, and runs this where not); the floor (--min-drain) runs from this command's start",
    )
    .addOption(statusUrlOption())
    .addOption(
      option("--timeout <duration>", "give up after").default(5000, "5s").argParser(durationArg),
    )
    .exitOverride()
    .action((o) => run(requestDrain({ statusUrl: o.statusUrl, timeoutMs: o.timeout })));
}

/** An image reference: not empty, no spaces (the API server refuses both). */
function imageArg(value: string): string {
  if (/^\S+$/.test(value)) return value;
  throw new InvalidArgumentError("An image reference cannot be empty or hold spaces.");
}

/** A ConfigMap's name as the API server takes it: a DNS subdomain (RFC 1123). */
function configMapArg(value: string): string {
  const label = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
  if (value.length <= 253 && new RegExp(`^${label}(\\.${label})*$`).test(value)) return value;
  throw new InvalidArgumentError(
    "A ConfigMap name is lowercase letters, digits, '-' and '.', begins and ends with a letter or digit, and has at most 253 characters.",
  );
}
