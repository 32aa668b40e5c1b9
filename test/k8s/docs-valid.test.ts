// Every Kubernetes object the docs show (README.md, docs/*.md: whole objects, and pod specs and
// containers completed into Pods) and every manifest in examples/k8s, as the Kubernetes API
// server itself judges them: server-side dry run with strict field validation (v1.34).
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { docsKubernetesObjects, where } from "../support/docs-blocks.ts";
import { type KubeApi, kubeApiSkipReason, startKubeApi } from "../support/kube-api.ts";
import { root } from "../support/paths.ts";

const examples = readdirSync(join(root, "examples/k8s")).filter((f) => /\.ya?ml$/.test(f)).sort();
const skip = kubeApiSkipReason();

if (skip) {
  it.skip(`docs and examples against the API server: ${skip}`, () => {});
} else {
  describe("the API server accepts what the docs and examples show", () => {
    let api: KubeApi;
    beforeAll(async () => {
      api = await startKubeApi();
    }, 120_000);
    afterAll(async () => {
      await api?.stop();
    });

    it("every Kubernetes object in README.md and docs/*.md", async () => {
      const objects = docsKubernetesObjects();
      expect(objects.length).toBeGreaterThan(0);
      const rejected: string[] = [];
      const notServed: string[] = [];
      for (const { block, object } of objects) {
        for (const error of await api.validate(JSON.stringify(object))) {
          // Kinds this API server has no API for are listed, and must be the known ones.
          if (/no matches for kind/.test(error)) {
            notServed.push(`${where(block)}: ${(object as { kind?: string }).kind}`);
          } else rejected.push(`${where(block)}: ${error}`);
        }
      }
      expect(rejected).toEqual([]);
      // Envoy Gateway's own configuration file (kind EnvoyGateway), not an object of the API.
      expect(notServed).toEqual([expect.stringMatching(/^docs\/migration\.md:\d+: EnvoyGateway$/)]);
    });

    it.each(examples)("examples/k8s/%s", async (file) => {
      expect(await api.validate(readFileSync(join(root, "examples/k8s", file), "utf8"))).toEqual(
        [],
      );
    });
  });
}
