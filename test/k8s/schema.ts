// Validates workloads against the Kubernetes schemas of kubernetes-models, closing its gap on
// unknown container fields.
import { CronJob } from "kubernetes-models/batch/v1/CronJob";
import { Job } from "kubernetes-models/batch/v1/Job";
import { DaemonSet } from "kubernetes-models/apps/v1/DaemonSet";
import { Deployment } from "kubernetes-models/apps/v1/Deployment";
import { StatefulSet } from "kubernetes-models/apps/v1/StatefulSet";
import { Pod } from "kubernetes-models/v1/Pod";
import type { Json } from "../support/json.ts";

const MODELS: Record<string, new (data: Json) => { validate(): void }> = {
  Pod,
  Deployment,
  StatefulSet,
  DaemonSet,
  Job,
  CronJob,
};

/** Throws with the schema's complaint when `object` is not a valid workload of its kind. */
export function validateWorkload(object: Record<string, unknown>): void {
  const Model = MODELS[object.kind as string];
  if (!Model) throw new Error(`no schema for kind ${String(object.kind)}`);
  new Model(object).validate();
}

/** Fields of core/v1 Container (Kubernetes 1.29+: `restartPolicy` included). */
export const CONTAINER_FIELDS = new Set([
  "args",
  "command",
  "env",
  "envFrom",
  "image",
  "imagePullPolicy",
  "lifecycle",
  "livenessProbe",
  "name",
  "ports",
  "readinessProbe",
  "resizePolicy",
  "resources",
  "restartPolicy",
  "securityContext",
  "startupProbe",
  "stdin",
  "stdinOnce",
  "terminationMessagePath",
  "terminationMessagePolicy",
  "tty",
  "volumeDevices",
  "volumeMounts",
  "workingDir",
]);
/** Fields of core/v1 Probe. */
export const PROBE_FIELDS = new Set([
  "exec",
  "failureThreshold",
  "grpc",
  "httpGet",
  "initialDelaySeconds",
  "periodSeconds",
  "successThreshold",
  "tcpSocket",
  "terminationGracePeriodSeconds",
  "timeoutSeconds",
]);

/** Names of fields of a container (and its probes and hooks) that the Kubernetes API does not know. */
export function unknownContainerFields(container: Json): string[] {
  const unknown = Object.keys(container).filter((k) => !CONTAINER_FIELDS.has(k));
  for (const probe of ["startupProbe", "readinessProbe", "livenessProbe"]) {
    if (container[probe]) {
      unknown.push(
        ...Object.keys(container[probe]).filter((k) => !PROBE_FIELDS.has(k)).map((k) =>
          `${probe}.${k}`
        ),
      );
    }
  }
  for (const hook of ["postStart", "preStop"]) {
    const handler = container.lifecycle?.[hook];
    if (handler) {
      unknown.push(
        ...Object.keys(handler).filter((k) =>
          !["exec", "httpGet", "sleep", "tcpSocket"].includes(k)
        ).map((k) => `lifecycle.${hook}.${k}`),
      );
    }
  }
  return unknown;
}
