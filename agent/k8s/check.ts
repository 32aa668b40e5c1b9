// `lastcall check`: the termination timing chain of each pod template, from endpoint removal to the
// grace period.
import { readManifest } from "./manifest.ts";
import { findProxies } from "./proxies.ts";
import { findPodTemplate, isRecord, type PodTemplate } from "./workloads.ts";
import { type ManifestContext, manifestContext, wiringChecks } from "./check-wiring.ts";
import { checkPod } from "./check-pod.ts";

export { APP_SHUTDOWN_MS, checkPod, ENDPOINT_REMOVAL_MS } from "./check-pod.ts";

/** One problem in a pod's termination timing. */
export interface Finding {
  /** The workload: `deployment/web`. */
  ref: string;
  /** What is wrong, with the fields, their values and a fix. */
  message: string;
}

/** What check found in one workload. */
export interface WorkloadCheck {
  /** `deployment/web`. */
  ref: string;
  /** The proxies found, by container name (a pair such as Contour's counts once). */
  proxies: string[];
  /** Problems, one line each without the workload's name. */
  findings: string[];
  /** What was not checked and why (no proxy, a proxy whose timing is not modelled): not problems. */
  notes: string[];
}

/**
 * Checks every pod template of a manifest: Pod, Deployment, StatefulSet, DaemonSet, Job and
 * CronJob documents, also as the items of a `kind: List` (what `kubectl get -o yaml` prints)
 * or of a typed list (`DeploymentList`).
 *
 * @example
 * ```ts
 * const report = checkReport(text);
 * console.log(summaryLine(report)); // "2 workloads, 1 proxy, 0 findings"
 * ```
 * @throws {ManifestError} when the manifest is not YAML
 */
export function checkReport(text: string): WorkloadCheck[] {
  const objects = readManifest(text).flatMap(({ doc }) => workloadObjects(doc.toJS()));
  const context = manifestContext(objects);
  return objects.flatMap((object) => {
    const template = findPodTemplate(object);
    return template
      ? [
        checkWorkload(template, {
          context,
          namespace: (object as { metadata?: { namespace?: unknown } }).metadata?.namespace,
        }),
      ]
      : [];
  });
}

/**
 * The findings of {@linkcode checkReport}, one per line.
 *
 * @example
 * ```ts
 * for (const f of checkManifest(text)) console.log(`${f.ref}: ${f.message}`);
 * ```
 * @throws {ManifestError} when the manifest is not YAML
 */
export function checkManifest(text: string): Finding[] {
  return checkReport(text).flatMap(({ ref, findings }) =>
    findings.map((message) => ({ ref, message }))
  );
}

/**
 * The last line of every check: `3 workloads, 2 proxies, 1 finding`, and why nothing was
 * checked when there is no workload.
 *
 * @example
 * ```ts
 * summaryLine([]); // "0 workloads, 0 proxies, 0 findings: nothing to check (no Pod, Deployment, StatefulSet, DaemonSet, Job or CronJob)"
 * ```
 */
export function summaryLine(report: readonly WorkloadCheck[]): string {
  const count = (n: number, one: string, many: string) => `${n} ${n === 1 ? one : many}`;
  const proxies = report.reduce((sum, w) => sum + w.proxies.length, 0);
  const findings = report.reduce((sum, w) => sum + w.findings.length, 0);
  const line = `${count(report.length, "workload", "workloads")}, ${
    count(proxies, "proxy", "proxies")
  }, ${count(findings, "finding", "findings")}`;
  return report.length
    ? line
    : `${line}: nothing to check (no Pod, Deployment, StatefulSet, DaemonSet, Job or CronJob)`;
}

/** The objects of a document: itself, or the items of a list (typed lists' items get their kind). */
function workloadObjects(value: unknown): unknown[] {
  if (
    !isRecord(value) || typeof value.kind !== "string" || !value.kind.endsWith("List") ||
    !Array.isArray(value.items)
  ) return [value];
  // The API server leaves kind out of a typed list's items; kubectl's `kind: List` has it.
  const itemKind = value.kind === "List" ? undefined : value.kind.slice(0, -"List".length);
  return value.items.flatMap((item) =>
    workloadObjects(
      itemKind && isRecord(item) && item.kind === undefined ? { ...item, kind: itemKind } : item,
    )
  );
}

/**
 * Checks one workload's pod template.
 *
 * @example
 * ```ts
 * checkWorkload(findPodTemplate(deployment)!).notes; // ["no proxy found: only the apps' preStop hooks …"]
 * ```
 */
export function checkWorkload(
  template: PodTemplate,
  manifest?: { context: ManifestContext; namespace: unknown },
): WorkloadCheck {
  const spec = template.spec;
  if (!spec) {
    return {
      ref: template.ref,
      proxies: [],
      findings: [],
      notes: ["no pod spec: nothing to check"],
    };
  }
  const proxies = findProxies(
    spec,
    { ...template.labels, ...template.annotations },
    !template.runsToCompletion,
  );
  const onlyApps = ": only the apps' preStop hooks against the grace period were checked";
  const notes = proxies.length === 0
    ? [`no proxy found${onlyApps}`]
    : proxies.filter((p) => p.unmodelled).map((p) =>
      `${p.container} (${p.unmodelled}): timing not modelled${
        proxies.every((q) => q.unmodelled) ? onlyApps : ""
      }`
    );
  const wiring = manifest
    ? wiringChecks(
      template,
      manifest.namespace,
      manifest.context,
      new Set(proxies.flatMap((p) => p.members)),
    )
    : { findings: [], notes: [] };
  return {
    ref: template.ref,
    proxies: [...new Set(proxies.map((p) => p.container))],
    findings: [...checkPod(template, proxies), ...wiring.findings],
    notes: [...notes, ...wiring.notes],
  };
}
