// How inject sends an app's readiness probe through Envoy (agent/k8s/probe-wiring.ts): which
// probes move to the listener, which stay as written, and the invariant over any probe: the pod
// is Ready only while Envoy serves, through exactly one gate (the app's probe or the sidecar's).
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { injectManifest } from "../../agent/k8s/inject.ts";
import { SIDECAR_DEFAULTS } from "../../agent/k8s/sidecar.ts";
import { objects, specOf, workload } from "./workloads.ts";
import YAML from "yaml";
import type { Json } from "../support/json.ts";

const PORTS = [
  { name: "http", containerPort: 8080 },
  { name: "grpc-api", containerPort: 9000 },
  { name: "https-web", containerPort: 8443 },
  { containerPort: 7070 },
];

/** The injected pod spec of one app container with these probes (native, the default). */
function injected(probes: Record<string, unknown>, mode: "native" | "classic" = "native") {
  const app = { name: "app", image: "example/app:1", ports: PORTS, ...probes };
  const result = injectManifest(
    YAML.stringify(workload("Deployment", { containers: [app] }, "shop")),
    { ...SIDECAR_DEFAULTS, mode },
  );
  const spec = specOf(objects(result.text)[0]);
  const sidecar = [...(spec.initContainers ?? []), ...spec.containers].find((c: Json) =>
    c.name === "lastcall"
  );
  return { app: spec.containers.find((c: Json) => c.name === "app"), sidecar, result };
}

describe("an app's readiness probe through Envoy", () => {
  it.each([
    ["a port number", { httpGet: { path: "/ready", port: 8080 } }, 18080],
    [
      "the port's name (moved to Envoy's port)",
      { httpGet: { path: "/ready", port: "http" } },
      18080,
    ],
    ["scheme HTTP written out", { httpGet: { port: 7070, scheme: "HTTP" } }, 17070],
    ["a port named for gRPC (an HTTP listener)", { httpGet: { port: "grpc-api" } }, 19000],
  ])("moves to the listener: %s", (_, readinessProbe, listener) => {
    const { app, sidecar, result } = injected({ readinessProbe });
    expect(app.readinessProbe.httpGet.port).toBe(listener);
    expect(sidecar.readinessProbe).toBeUndefined();
    expect(result.notes.filter((n) => n.includes("readiness probe"))).toHaveLength(1);
  });

  it.each([
    ["exec", { exec: { command: ["true"] } }],
    ["tcpSocket", { tcpSocket: { port: 8080 } }],
    ["grpc", { grpc: { port: 9000 } }],
    ["HTTPS", { httpGet: { port: 8080, scheme: "HTTPS" } }],
    ["another host", { httpGet: { port: 8080, host: "10.0.0.1" } }],
    ["a port no listener fronts", { httpGet: { port: 9999 } }],
  ])("stays as written, and the sidecar keeps its own: %s", (_, readinessProbe) => {
    const { app, sidecar } = injected({ readinessProbe });
    expect(app.readinessProbe).toEqual(readinessProbe);
    expect(sidecar.readinessProbe.httpGet.port).toBe(15020);
  });

  it("a port Envoy fronts with tcp_proxy: the probe follows the port's new name, to the app", () => {
    const { app, sidecar } = injected({ readinessProbe: { httpGet: { port: "https-web" } } });
    expect(app.readinessProbe).toEqual({ httpGet: { port: "https-web-app" } });
    expect(sidecar.readinessProbe.httpGet.port).toBe(15020);
  });

  it("an app without a readiness probe: the sidecar keeps its own", () => {
    expect(injected({}).sidecar.readinessProbe.httpGet.path).toMatch(/^\/healthz\/ready/);
  });

  it("liveness and startup probes keep going to the app", () => {
    const probe = () => ({ httpGet: { path: "/", port: 8080 } });
    const { app } = injected({
      readinessProbe: probe(),
      livenessProbe: probe(),
      startupProbe: probe(),
    });
    expect([app.livenessProbe, app.startupProbe]).toEqual([probe(), probe()]);
    expect(app.readinessProbe.httpGet.port).toBe(18080);
  });

  it("a readiness probe others alias stays as written; one that aliases moves alone", () => {
    const pod = (probes: string) =>
      injectManifest(
        `apiVersion: v1
kind: Pod
metadata: {name: shop}
spec:
  containers:
  - name: app
    image: example/app:1
    ports: [{containerPort: 8080}]
${probes}`,
        SIDECAR_DEFAULTS,
      ).text;
    const anchor = pod(`    readinessProbe: &probe {httpGet: {path: /, port: 8080}}
    livenessProbe: *probe`);
    const a = objects(anchor)[0].spec;
    expect([a.containers[0].readinessProbe, a.containers[0].livenessProbe]).toEqual([
      { httpGet: { path: "/", port: 8080 } },
      { httpGet: { path: "/", port: 8080 } },
    ]);
    expect(a.initContainers[0].readinessProbe.httpGet.port).toBe(15020);
    const alias = pod(`    livenessProbe: &probe {httpGet: {path: /, port: 8080}}
    readinessProbe: *probe`);
    const b = objects(alias)[0].spec;
    expect(b.containers[0].livenessProbe).toEqual({ httpGet: { path: "/", port: 8080 } });
    expect(b.containers[0].readinessProbe).toEqual({ httpGet: { path: "/", port: 18080 } });
    expect(b.initContainers[0].readinessProbe).toBeUndefined();
  });

  it("classic mode leaves the app's probe to the app (its Envoy may start after the app)", () => {
    const { app, sidecar } = injected({ readinessProbe: { httpGet: { port: 8080 } } }, "classic");
    expect(app.readinessProbe).toEqual({ httpGet: { port: 8080 } });
    expect(sidecar.readinessProbe.httpGet.port).toBe(15020);
  });

  it("property: any readiness probe, one gate on Envoy (the app's through a listener, or the sidecar's)", () => {
    const port = fc.oneof(
      fc.constantFrom(8080, 9000, 8443, 7070, 9999, 1),
      fc.constantFrom("http", "grpc-api", "https-web", "nope"),
    );
    const probe = fc.oneof(
      fc.constant(undefined),
      fc.record({ exec: fc.constant({ command: ["true"] }) }),
      fc.record({ tcpSocket: fc.record({ port }) }),
      fc.record({
        httpGet: fc.record({
          port,
          path: fc.constantFrom("/", "/ready"),
          scheme: fc.constantFrom(undefined, "HTTP", "HTTPS"),
          host: fc.constantFrom(undefined, "127.0.0.1"),
        }, { requiredKeys: ["port"] }),
      }),
    );
    fc.assert(fc.property(probe, (readinessProbe) => {
      const probes = readinessProbe
        ? { readinessProbe: JSON.parse(JSON.stringify(readinessProbe)) }
        : {};
      const { app, sidecar } = injected(probes);
      const listener = [18080, 19000, 18443, 17070];
      const throughEnvoy = listener.includes(app.readinessProbe?.httpGet?.port);
      expect(throughEnvoy !== (sidecar.readinessProbe !== undefined)).toBe(true);
      if (throughEnvoy) {
        expect(app.readinessProbe.httpGet.host).toBeUndefined();
        expect(app.readinessProbe.httpGet.scheme ?? "HTTP").toBe("HTTP");
      }
    }));
  });
});
