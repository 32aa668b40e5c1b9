import { injectManifest } from "../k8s/inject.ts";
import type { SidecarOptions } from "../k8s/sidecar.ts";
import { writeErr, writeOut } from "../runtime/process.ts";
import { withManifest } from "./manifest-input.ts";

/**
 * `lastcall inject -f FILE`: prints the manifest with the lastcall sidecar added to every pod
 * template; warnings (containers it could not wrap, pods left alone) go to stderr, one line each.
 *
 * @example
 * ```ts
 * process.exitCode = await injectCommand("deploy.yaml", SIDECAR_DEFAULTS);
 * ```
 */
export function injectCommand(path: string, options: SidecarOptions): Promise<number> {
  return withManifest(path, function inject(text) {
    const result = injectManifest(text, options);
    for (const line of result.warnings) writeErr(`lastcall inject: ${line}`);
    if (result.text !== "") writeOut(result.text);
    return 0;
  });
}
