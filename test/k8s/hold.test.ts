// What inject gives the app containers: lastcall's preStop (`GET /v1/app-stop`) where they have
// none, and a hold at start (the sidecar's startup probe, or postStart `lastcall wait` and
// `lastcall exec`) only where the pod's Envoy config may carry the app's calls out.
import { describe, expect, it } from "vitest";
import YAML from "yaml";
import { injectManifest, type InjectOptions } from "../../agent/k8s/inject.ts";
import { SIDECAR_DEFAULTS } from "../../agent/k8s/sidecar.ts";
import { manifest, objects, podSpec, specOf, workload } from "./workloads.ts";
import type { Json } from "../support/json.ts";

const native: InjectOptions = SIDECAR_DEFAULTS;
const classic: InjectOptions = { ...SIDECAR_DEFAULTS, mode: "classic" };
const appStop = (port = 15020) => ({ httpGet: { path: "/v1/app-stop", port } });
const injected = (text: string, options: InjectOptions) => {
  const result = injectManifest(text, options);
  return { result, spec: specOf(objects(result.text)[0]) };
};
const sidecarOf = (spec: Json) =>
  [...(spec.initContainers ?? []), ...spec.containers].find((c) => c.name === "lastcall");
/** The user's ConfigMap of the generated name, holding what inject writes (inbound only), edited. */
function ownConfigMap(edit: (config: Json) => void = () => {}): string {
  const generated = objects(injectManifest(manifest(workload("Deployment")), native).text)[1];
  const config = YAML.parse(generated.data["envoy.yaml"]);
  edit(config);
  return YAML.stringify({ ...generated, data: { "envoy.yaml": YAML.stringify(config) } });
}
const OUTBOUND = {
  name: "outbound_backend",
  traffic_direction: "OUTBOUND",
  address: { socket_address: { address: "127.0.0.1", port_value: 15001 } },
  filter_chains: [{
    filters: [{
      name: "envoy.filters.network.tcp_proxy",
      typed_config: {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
        stat_prefix: "out",
        cluster: "backend",
      },
    }],
  }],
};

describe("the app's preStop", () => {
  it.each([native, classic])(
    "an app container without one gets GET /v1/app-stop on the status port (%j)",
    (options) => {
      const spec = podSpec({
        containers: [...podSpec().containers, {
          name: "worker",
          image: "example/worker:1",
          lifecycle: { postStart: { exec: { command: ["warm"] } } },
        }],
      });
      const { spec: out } = injected(manifest(workload("Deployment", spec)), options);
      const apps = out.containers.filter((c: { name: string }) => c.name !== "lastcall");
      expect(apps.map((c: Json) => c.lifecycle)).toEqual([
        { preStop: appStop() },
        { postStart: { exec: { command: ["warm"] } }, preStop: appStop() },
      ]);
    },
  );

  it("an app's own preStop is kept as written", () => {
    const lifecycle = {
      preStop: { exec: { command: ["/bin/sh", "-c", "sleep 5; nginx -s quit"] } },
    };
    const spec = podSpec({ containers: [{ ...podSpec().containers[0], lifecycle }] });
    const { spec: out } = injected(manifest(workload("Deployment", spec)), native);
    expect(out.containers[0].lifecycle).toEqual(lifecycle);
  });

  it("follows the status port when 15020 is taken in the pod", () => {
    const spec = podSpec({
      containers: [{
        ...podSpec().containers[0],
        ports: [{ containerPort: 8080 }, { containerPort: 15020 }],
      }],
    });
    const { spec: out } = injected(manifest(workload("Deployment", spec)), native);
    expect(out.containers[0].lifecycle).toEqual({ preStop: appStop(15021) });
  });
});

describe("--hold-app auto (the default)", () => {
  it.each([native, classic])(
    "inject's generated config is inbound only: the app starts at once, nothing said (%j)",
    (options) => {
      const { result, spec } = injected(manifest(workload("Deployment")), options);
      const sidecar = sidecarOf(spec);
      expect(sidecar.startupProbe).toBeUndefined();
      expect(sidecar.lifecycle?.postStart).toBeUndefined();
      expect(spec.containers.find((c: { name: string }) => c.name === "app").command).toEqual([
        "./server",
      ]);
      expect(spec.initContainers?.map((c: { name: string }) => c.name) ?? ["lastcall"]).toEqual([
        "lastcall",
      ]);
      expect(result.notes.filter((n) => /waits for Envoy/.test(n))).toEqual([]);
    },
  );

  it("a ConfigMap of the manifest with inbound listeners only: the app starts at once", () => {
    const { result, spec } = injected(
      manifest(workload("Deployment")) + "---\n" + ownConfigMap(),
      native,
    );
    expect(sidecarOf(spec).startupProbe).toBeUndefined();
    expect(result.notes.filter((n) => /waits for Envoy/.test(n))).toEqual([]);
  });

  it("a ConfigMap of the manifest with an OUTBOUND listener: native holds the app on the startup probe, and says why", () => {
    const text = manifest(workload("Deployment")) + "---\n" +
      ownConfigMap((c) => c.static_resources.listeners.push(OUTBOUND));
    const { result, spec } = injected(text, native);
    expect(sidecarOf(spec).startupProbe).toEqual({
      httpGet: { path: "/healthz/ready?wait_ms=2900", port: 15020 },
      timeoutSeconds: 3,
      periodSeconds: 1,
      failureThreshold: 60,
    });
    expect(result.notes).toContain(
      "deployment/web: the app waits for Envoy to be ready at start (ConfigMap web-lastcall-envoy has the OUTBOUND listener outbound_backend for the app's calls out; --hold-app never to start it at once)",
    );
  });

  it("--config-map not in the manifest: classic holds the app with lastcall wait and lastcall exec", () => {
    const { result, spec } = injected(manifest(workload("Deployment")), {
      ...classic,
      configMap: "edge",
    });
    expect(sidecarOf(spec).lifecycle).toEqual({
      postStart: { exec: { command: ["lastcall", "wait"] } },
    });
    expect(spec.containers[1].command).toEqual([
      "/lastcall/bin/lastcall",
      "exec",
      "--no-quit",
      "--",
      "./server",
    ]);
    expect(result.notes).toContain(
      "deployment/web: the app waits for Envoy to be ready at start (ConfigMap edge is not in this manifest, so its listeners may carry the app's calls out; --hold-app never to start it at once)",
    );
  });
});

describe("--hold-app never and always", () => {
  it("never: a --config-map pod starts at once, its app not wrapped", () => {
    const { result, spec } = injected(manifest(workload("Deployment")), {
      ...classic,
      configMap: "edge",
      holdApp: "never",
    });
    expect(sidecarOf(spec).lifecycle).toBeUndefined();
    expect(spec.containers.map((c: { name: string }) => c.name)).toEqual(["app", "lastcall"]);
    expect(spec.containers[0].command).toEqual(["./server"]);
    expect(result.notes.filter((n) => /waits for Envoy/.test(n))).toEqual([]);
  });

  it("always: the generated config's pod holds its app too", () => {
    const { result, spec } = injected(manifest(workload("Deployment")), {
      ...native,
      holdApp: "always",
    });
    expect(sidecarOf(spec).startupProbe).toBeDefined();
    expect(result.notes).toContain(
      "deployment/web: the app waits for Envoy to be ready at start (--hold-app always; --hold-app never to start it at once)",
    );
  });
});
