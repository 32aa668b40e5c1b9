// Minimal valid workloads of each kind, for the inject and check tests.
import YAML from "yaml";
import type { Json } from "../support/json.ts";

/** A pod spec with one app container, on port 8080. */
export const podSpec = (extra: Record<string, unknown> = {}) => ({
  containers: [{
    name: "app",
    image: "example/app:1",
    command: ["./server"],
    args: ["--port", "8080"],
    ports: [{ containerPort: 8080 }],
  }],
  ...extra,
});

/** Wraps a pod spec into a workload of `kind`. */
export function workload(
  kind: string,
  spec: Record<string, unknown> = podSpec(),
  name = "web",
): Json {
  const template = { metadata: { labels: { app: name } }, spec };
  const selector = { matchLabels: { app: name } };
  const metadata = { name };
  switch (kind) {
    case "Pod":
      return { apiVersion: "v1", kind, metadata, spec };
    case "Deployment":
      return { apiVersion: "apps/v1", kind, metadata, spec: { replicas: 2, selector, template } };
    case "StatefulSet":
      return {
        apiVersion: "apps/v1",
        kind,
        metadata,
        spec: { serviceName: name, selector, template },
      };
    case "DaemonSet":
      return { apiVersion: "apps/v1", kind, metadata, spec: { selector, template } };
    case "Job":
      return {
        apiVersion: "batch/v1",
        kind,
        metadata,
        spec: { template: { ...template, spec: { restartPolicy: "Never", ...spec } } },
      };
    case "CronJob":
      return {
        apiVersion: "batch/v1",
        kind,
        metadata,
        spec: {
          schedule: "0 3 * * *",
          jobTemplate: {
            spec: { template: { ...template, spec: { restartPolicy: "OnFailure", ...spec } } },
          },
        },
      };
    default:
      throw new Error(`no such kind ${kind}`);
  }
}

/** The six kinds inject and check know. */
export const KINDS = ["Pod", "Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob"] as const;

/** The pod spec inside a workload. */
export function specOf(object: Json): Json {
  switch (object.kind) {
    case "Pod":
      return object.spec;
    case "CronJob":
      return object.spec.jobTemplate.spec.template.spec;
    default:
      return object.spec.template.spec;
  }
}

/** Objects as a multi-document YAML manifest. */
export function manifest(...objects: unknown[]): string {
  return objects.map((o) => YAML.stringify(o)).join("---\n");
}

/** Every document of a manifest as plain objects. */
export function objects(text: string): Json[] {
  return YAML.parseAllDocuments(text).map((d) => d.toJS());
}
