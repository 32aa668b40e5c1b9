import { checkManifest } from "../k8s/check.ts";
import { writeOut } from "../runtime/process.ts";
import { withManifest } from "./manifest-input.ts";

/**
 * `lastcall check -f FILE`: prints one line per problem in the pods' termination timing,
 * `deployment/web: …`; exits 1 when there is any, 0 when there is none.
 *
 * @example
 * ```ts
 * process.exitCode = await checkCommand("deploy.yaml");
 * ```
 */
export function checkCommand(path: string): Promise<number> {
  return withManifest(path, function check(text) {
    const findings = checkManifest(text);
    for (const { ref, message } of findings) writeOut(`${ref}: ${message}`);
    return findings.length ? 1 : 0;
  });
}
