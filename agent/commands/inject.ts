import { injectManifest } from "../k8s/inject.ts";
import type { InjectOptions } from "../k8s/inject.ts";
import { writeErr, writeOut } from "../runtime/process.ts";
import { withManifest } from "./manifest-input.ts";

/**
 * `lastcall inject -f FILE`: prints the manifest with the lastcall sidecar added to every pod
 * template, and what wires traffic through it (a ConfigMap with Envoy's listeners, Services
 * pointed at them); what it wired, then warnings (containers it could not wrap, pods left alone,
 * Services that still reach an app directly) go to stderr, one line each.
 * Exit 1 when a pod was refused (another proxy, hostNetwork, too short a grace period): the
 * manifest is still printed, with that pod as it was; 2 when the input cannot be read.
 *
 * @example
 * ```ts
 * process.exitCode = await injectCommand("deploy.yaml", SIDECAR_DEFAULTS);
 * ```
 */
export function injectCommand(path: string, options: InjectOptions): Promise<number> {
  return withManifest(path, function inject(text) {
    const result = injectManifest(text, options);
    for (const line of [...result.notes, ...result.warnings]) writeErr(`lastcall inject: ${line}`);
    if (result.text !== "") writeOut(result.text);
    return result.refused > 0 ? 1 : 0;
  });
}
