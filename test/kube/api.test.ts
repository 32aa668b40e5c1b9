// The real API server as a validator (test/support/kube-api.ts): etcd + kube-apiserver v1.34.4 on
// loopback; `validate()` is the server's own verdict (server-side dry run, strict fields).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type KubeApi, kubeApiSkipReason, startKubeApi } from "../support/kube-api.ts";

const deployment = (extra = "", mode = "0644") =>
  `# a comment before the first document
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: localhost/web:1
        imagePullPolicy: Never${extra}
        volumeMounts: [{name: config, mountPath: /etc/web}]
      volumes:
      - name: config
        configMap: {name: web, defaultMode: ${mode}}
`;

const skip = kubeApiSkipReason();

if (skip) {
  it.skip(`kube api: ${skip}`, () => {});
} else {
  describe("kube-apiserver as a validator", () => {
    let api: KubeApi;
    beforeAll(async () => {
      api = await startKubeApi();
    });
    afterAll(async () => {
      await api?.stop();
    });

    it("accepts a valid Deployment (YAML 1.1 octal 0644, a namespace that does not exist) and a Service", async () => {
      const service =
        "---\napiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec:\n  selector: {app: web}\n  ports: [{port: 80, targetPort: 8080}]\n";
      expect(await api.validate(`${deployment()}${service}---\n# only a comment\n`)).toEqual([]);
    });

    it("rejects defaultMode: 644 (decimal 644 > 0777), naming the object and the field", async () => {
      const errors = await api.validate(deployment("", "644"));
      expect(errors).toHaveLength(1);
      expect(errors[0]).toMatch(/^Deployment\/web: .*defaultMode.*0777/);
    });

    it("rejects an unknown field (strict validation), one line per rejected document", async () => {
      const errors = await api.validate(
        `${deployment("\n        bogusField: 1")}---\n${
          deployment("", "644").replace("name: web,", "name: web2,")
        }`,
      );
      expect(errors).toHaveLength(2);
      expect(errors[0]).toMatch(
        /^Deployment\/web: .*unknown field "spec\.template\.spec\.containers\[0\]\.bogusField"/,
      );
      expect(errors[1]).toMatch(/^Deployment\/web2: .*defaultMode/);
    });

    it("names a kind it has no API for (a custom resource), so callers can filter it", async () => {
      const errors = await api.validate(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: vs}\nspec: {}\n",
      );
      expect(errors).toHaveLength(1);
      expect(errors[0]).toMatch(/^VirtualService\/vs: .*no matches for kind "VirtualService"/);
    });

    it("has the namespace default and runs kubectl", async () => {
      expect((await api.kubectl(["get", "namespace", "default", "-o", "name"])).trim()).toBe(
        "namespace/default",
      );
    });
  });
}
