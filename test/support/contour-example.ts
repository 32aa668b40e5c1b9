// Contour's Envoy DaemonSet from examples/k8s/contour-envoy.yaml, as the tests that run it start
// from: no `contour bootstrap` init container, the static config from a ConfigMap, no
// certificates, and lastcall's locally built image in every container.
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { expect } from "vitest";
import YAML from "yaml";

const EXAMPLE = fileURLToPath(new URL("../../examples/k8s/contour-envoy.yaml", import.meta.url));

/**
 * The example's DaemonSet with its config volume from ConfigMap `configMap`, its certificate
 * volume empty, and `image` (never pulled) in every container; the example must name
 * `lastcall:0.1.0`, so a changed example fails here rather than run stale.
 *
 * @example
 * const { daemonSet, spec } = contourDaemonSet("envoy-config", images.lastcall);
 * for (const c of spec.containers) delete c.ports;
 */
export function contourDaemonSet(
  configMap: string,
  image: string,
  // deno-lint-ignore no-explicit-any
): { daemonSet: any; spec: any } {
  const daemonSet = YAML.parse(readFileSync(EXAMPLE, "utf8"));
  const spec = daemonSet.spec.template.spec;
  delete spec.initContainers;
  spec.volumes = spec.volumes.map((v: { name: string }) =>
    v.name === "envoy-config"
      ? { name: v.name, configMap: { name: configMap } }
      : v.name === "envoycert"
      ? { name: v.name, emptyDir: {} }
      : v
  );
  for (const c of spec.containers) {
    expect(c.image).toBe("lastcall:0.1.0");
    Object.assign(c, { image, imagePullPolicy: "Never" });
  }
  return { daemonSet, spec };
}
