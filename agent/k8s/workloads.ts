// Where the pod template sits in each kind of workload. Everything else about Kubernetes
// objects is out of scope: unknown kinds are passed through by the callers.

/** Kinds whose pod template lastcall can find. */
export type WorkloadKind = "Pod" | "Deployment" | "StatefulSet" | "DaemonSet" | "Job" | "CronJob";

const TEMPLATE = ["spec", "template"];
/** Path of the object holding the pod's `metadata` and `spec`, per kind. */
const POD_PATHS: Record<WorkloadKind, readonly string[]> = {
  Pod: [],
  Deployment: TEMPLATE,
  StatefulSet: TEMPLATE,
  DaemonSet: TEMPLATE,
  Job: TEMPLATE,
  CronJob: ["spec", "jobTemplate", "spec", "template"],
};

/** The pod template of one workload object. */
export interface PodTemplate {
  /** The workload's kind. */
  kind: WorkloadKind;
  /** How findings and warnings name the object: `deployment/web`. */
  ref: string;
  /** Path of the pod spec inside the object, e.g. `["spec", "template", "spec"]`. */
  specPath: string[];
  /** The pod spec (a plain object), or undefined when the object has none. */
  spec: Record<string, unknown> | undefined;
  /** The pod's annotations (the template's, not the workload's). */
  annotations: Record<string, unknown>;
  /** The pod's labels (the template's). */
  labels: Record<string, unknown>;
  /** Whether the pod is meant to end (Job, CronJob, a Pod with restartPolicy Never or OnFailure). */
  runsToCompletion: boolean;
}

/** Narrows to a plain object (a YAML mapping). */
export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Follows `path` through nested mappings; undefined when a step is missing or not a mapping. */
export function getPath(value: unknown, path: readonly string[]): unknown {
  let at = value;
  for (const key of path) {
    if (!isRecord(at)) return undefined;
    at = at[key];
  }
  return at;
}

/**
 * Finds the pod template of a workload object (parsed YAML), or undefined for other kinds.
 *
 * @example
 * ```ts
 * findPodTemplate({ kind: "CronJob", metadata: { name: "nightly" }, spec: {} })?.specPath;
 * // ["spec", "jobTemplate", "spec", "template", "spec"]
 * ```
 */
export function findPodTemplate(object: unknown): PodTemplate | undefined {
  if (
    !isRecord(object) || typeof object.kind !== "string" || !Object.hasOwn(POD_PATHS, object.kind)
  ) return undefined;
  const kind = object.kind as WorkloadKind;
  const podPath = POD_PATHS[kind];
  const spec = getPath(object, [...podPath, "spec"]);
  const annotations = getPath(object, [...podPath, "metadata", "annotations"]);
  const labels = getPath(object, [...podPath, "metadata", "labels"]);
  const restartPolicy = isRecord(spec) ? spec.restartPolicy : undefined;
  return {
    kind,
    ref: `${kind.toLowerCase()}/${objectName(object)}`,
    specPath: [...podPath, "spec"],
    spec: isRecord(spec) ? spec : undefined,
    annotations: isRecord(annotations) ? annotations : {},
    labels: isRecord(labels) ? labels : {},
    runsToCompletion: kind === "Job" || kind === "CronJob" || restartPolicy === "Never" ||
      restartPolicy === "OnFailure",
  };
}

/** The object's name, its generateName prefix, or `unnamed`. */
function objectName(object: Record<string, unknown>): string {
  const metadata = isRecord(object.metadata) ? object.metadata : {};
  if (typeof metadata.name === "string") return metadata.name;
  if (typeof metadata.generateName === "string") return `${metadata.generateName}*`;
  return "unnamed";
}
