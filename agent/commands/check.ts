import { checkReport, summaryLine } from "../k8s/check.ts";
import { writeOut } from "../runtime/process.ts";
import { withManifest } from "./manifest-input.ts";

/**
 * `lastcall check -f FILE`: prints, on stdout, one line per problem in the pods' termination
 * timing (`deployment/web: …`), a line for each workload where something was not checked (no
 * proxy found, a proxy whose timing is not modelled), then the summary
 * `N workloads, M proxies, K findings`; exits 1 when there is any finding, 0 when there is none.
 *
 * @example
 * ```ts
 * process.exitCode = await checkCommand("deploy.yaml");
 * ```
 */
export function checkCommand(path: string): Promise<number> {
  return withManifest(path, function check(text) {
    const report = checkReport(text);
    for (const { ref, findings, notes } of report) {
      for (const line of [...findings, ...notes]) writeOut(`${ref}: ${line}`);
    }
    writeOut(summaryLine(report));
    return report.some((w) => w.findings.length) ? 1 : 0;
  });
}
