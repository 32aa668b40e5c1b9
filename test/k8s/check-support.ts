// What the `lastcall check` tests of hand-built pods share: the findings as lines, and builders
// for app and lastcall containers and for a Deployment around them.
import { checkManifest } from "../../agent/k8s/check.ts";
import { manifest, workload } from "./workloads.ts";

/** The findings of `lastcall check` on a manifest, one `ref: message` line each. */
export const lines = (text: string) => checkManifest(text).map((f) => `${f.ref}: ${f.message}`);

/** An app container with a `sh -c "sleep N"` preStop (none when `preStopSeconds` is undefined). */
export const app = (preStopSeconds?: number, extra: Record<string, unknown> = {}) => ({
  name: "app",
  image: "example/app:1",
  ...(preStopSeconds !== undefined &&
    {
      lifecycle: { preStop: { exec: { command: ["/bin/sh", "-c", `sleep ${preStopSeconds}`] } } },
    }),
  ...extra,
});
/** A lastcall container running `lastcall run` with these extra flags. */
export const lastcall = (args: string[], extra: Record<string, unknown> = {}) => ({
  name: "lastcall",
  image: "lastcall:0.1.0",
  args: ["run", "--config", "/etc/envoy/envoy.yaml", ...args],
  ...extra,
});
/** A Deployment `web` with this pod spec and pod annotations. */
export const deployment = (spec: Record<string, unknown>, annotations?: Record<string, string>) => {
  const object = workload("Deployment", spec);
  if (annotations) object.spec.template.metadata.annotations = annotations;
  return manifest(object);
};
