// How inject wires traffic through the sidecar (agent/k8s/inject-wiring.ts): the ConfigMap, the
// listener ports, the names moved to Envoy's ports, the Services pointed at the listeners; and
// check's findings for a Service that still reaches the app, or an app port no listener serves.
import { describe, expect, it } from "vitest";
import YAML from "yaml";
import { checkReport } from "../../agent/k8s/check.ts";
import { planWires, readWires } from "../../agent/k8s/envoy-wiring.ts";
import { injectManifest } from "../../agent/k8s/inject.ts";
import { SIDECAR_DEFAULTS } from "../../agent/k8s/sidecar.ts";
import { manifest, objects, podSpec, specOf, workload } from "./workloads.ts";
import type { Json } from "../support/json.ts";

const inject = (text: string, options = SIDECAR_DEFAULTS) => injectManifest(text, options);
const shop = (extra: Record<string, unknown> = {}) =>
  workload("Deployment", {
    containers: [{
      name: "app",
      image: "example/shop:1",
      ports: [{ name: "http", containerPort: 8080 }, { containerPort: 9090 }],
      readinessProbe: { httpGet: { path: "/ready", port: "http" } },
      ...extra,
    }],
  }, "shop");
const service = (
  name: string,
  ports: Record<string, unknown>[],
  extra: Record<string, unknown> = {},
) => ({
  apiVersion: "v1",
  kind: "Service",
  metadata: { name, ...extra },
  spec: { selector: { app: "shop" }, ports },
});
const configOf = (object: Json) => YAML.parse(object.data["envoy.yaml"]);

describe("inject of a workload with declared ports", () => {
  const text = manifest(
    shop(),
    service("shop", [{ name: "web", port: 80, targetPort: "http" }, {
      name: "admin",
      port: 9090,
      targetPort: 9090,
    }]),
    service("shop-default", [{ port: 8080 }]),
  );
  const result = inject(text);
  const out = objects(result.text);

  it("writes the ConfigMap right after the workload: one inbound listener per app port, to 127.0.0.1", () => {
    expect(out.map((o) => `${o.kind}/${o.metadata.name}`)).toEqual([
      "Deployment/shop",
      "ConfigMap/shop-lastcall-envoy",
      "Service/shop",
      "Service/shop-default",
    ]);
    expect(readWires(configOf(out[1]))).toEqual({
      listeners: [{ name: "inbound_8080", port: 18080, appPorts: [8080] }, {
        name: "inbound_9090",
        port: 19090,
        appPorts: [9090],
      }],
      unseen: [],
    });
    const hcm =
      configOf(out[1]).static_resources.listeners[0].filter_chains[0].filters[0].typed_config;
    // Long requests, streams and WebSockets are never cut; HTTP/1.1 and h2c both taken.
    expect(hcm).toMatchObject({
      codec_type: "AUTO",
      stream_idle_timeout: "0s",
      upgrade_configs: [{ upgrade_type: "websocket" }],
    });
    expect(hcm.route_config.virtual_hosts[0].routes[0].route).toEqual({
      cluster: "app_8080",
      timeout: "0s",
    });
    expect(specOf(out[0]).volumes).toEqual([{
      name: "lastcall-config",
      configMap: { name: "shop-lastcall-envoy" },
    }]);
  });

  it("moves the port's name to Envoy's port; the app's readiness probe goes to Envoy's listener", () => {
    const spec = specOf(out[0]);
    expect(spec.initContainers[0].ports).toEqual([{ name: "http", containerPort: 18080 }, {
      containerPort: 19090,
    }]);
    expect(spec.containers[0].ports).toEqual([{ name: "http-app", containerPort: 8080 }, {
      containerPort: 9090,
    }]);
    expect(spec.containers[0].readinessProbe).toEqual({
      httpGet: { path: "/ready", port: 18080 },
    });
    // That probe says Envoy serves: the sidecar has none of its own.
    expect(spec.initContainers[0].readinessProbe).toBeUndefined();
  });

  it("in classic mode the app's probe follows the new name, and the sidecar keeps its own", () => {
    const spec = specOf(objects(inject(text, { ...SIDECAR_DEFAULTS, mode: "classic" }).text)[0]);
    expect(spec.containers[0].readinessProbe).toEqual({
      httpGet: { path: "/ready", port: "http-app" },
    });
    expect(spec.containers[1].readinessProbe.httpGet.port).toBe(15020);
  });

  it("points the Services at the listeners and says so, one line each, with no warning", () => {
    expect(out[2].spec.ports).toEqual([{ name: "web", port: 80, targetPort: "http" }, {
      name: "admin",
      port: 9090,
      targetPort: 19090,
    }]);
    expect(out[3].spec.ports).toEqual([{ port: 8080, targetPort: 18080 }]);
    expect(result.notes).toEqual([
      "deployment/shop: Envoy config in ConfigMap shop-lastcall-envoy (a new document after it): listeners 18080 → app port 8080, 19090 → app port 9090",
      `deployment/shop: service/shop port 80 (web): targetPort http now names lastcall's listener 18080 (container "app" port 8080 is renamed http-app)`,
      `deployment/shop: service/shop port 9090 (admin): targetPort 9090 → 19090 (lastcall's listener in front of container "app" port 9090)`,
      `deployment/shop: service/shop-default port 8080: targetPort 8080 → 18080 (lastcall's listener in front of container "app" port 8080)`,
      `deployment/shop: container "app" readiness probe: port 8080 → 18080 (through Envoy, so the pod is Ready only while Envoy serves it; the sidecar has no readiness probe of its own)`,
    ]);
    expect(result.warnings).toEqual([]);
  });

  it("injecting its output again changes nothing and says nothing", () => {
    expect(inject(result.text)).toEqual({
      text: result.text,
      warnings: [],
      notes: [],
      injected: 0,
      refused: 0,
    });
  });

  it("check finds the wiring whole: no finding about Services or listeners", () => {
    const findings = checkReport(result.text).flatMap((w) => [...w.findings, ...w.notes]);
    expect(findings.filter((f) => /targetPort|listener|Envoy config/.test(f))).toEqual([]);
  });
});

describe("listener ports and names", () => {
  const app = (ports: Record<string, unknown>[]) => ({ name: "app", ports });

  it("app port + 10000, past what the pod or lastcall (admin 15000, status 15020) takes; − 10000 above 55535", () => {
    const wires = planWires([
      app([{ containerPort: 5000 }, { containerPort: 8080 }, { containerPort: 60000 }, {
        containerPort: 18080,
      }]),
    ], []);
    expect(wires.map((w) => [w.appPort, w.listenerPort])).toEqual([[5000, 15001], [8080, 18081], [
      60000,
      50000,
    ], [18080, 28080]]);
  });

  it("an app on lastcall's ports moves them, with a line each, and no listener takes them", () => {
    const ports = [15000, 15020, 5001, 5021].map((containerPort) => ({ containerPort }));
    const result = inject(
      manifest(workload("Pod", { containers: [{ name: "app", image: "x", ports }] })),
    );
    const spec = specOf(objects(result.text)[0]);
    const sidecar = spec.initContainers.find((c: Json) => c.name === "lastcall");
    expect(sidecar.args).toEqual(
      expect.arrayContaining(["--status-port", "15021", "--admin-port", "15001"]),
    );
    expect(sidecar.ports.map((p: Json) => p.containerPort)).toEqual([25000, 25020, 15002, 15022]);
    expect(result.warnings).toEqual(expect.arrayContaining([
      "pod/web: port 15020 is taken in this pod: lastcall's status server uses 15021",
      "pod/web: port 15000 is taken in this pod: Envoy's admin uses 15001",
    ]));
  });

  it("the app's new name stays a valid port name: at most 15 characters, unique in the pod", () => {
    const wires = planWires([
      app([{ name: "metrics-exporter", containerPort: 9100 }, { name: "http", containerPort: 80 }, {
        name: "http-app",
        containerPort: 81,
      }]),
    ], []);
    expect(wires.map((w) => w.appName)).toEqual(["metrics-exp-app", "http-ap2", "http-app-app"]);
    for (const w of wires) expect(w.appName).toMatch(/^[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?$/);
  });

  it("UDP ports are not fronted; a port named for a TCP protocol gets tcp_proxy", () => {
    const wires = planWires([
      app([{ containerPort: 53, protocol: "UDP" }, { name: "tcp-db", containerPort: 5432 }]),
    ], []);
    expect(wires.map((w) => [w.appPort, w.protocol])).toEqual([[5432, "tcp"]]);
  });
});

describe("what inject cannot wire", () => {
  it("a pod that declares no port is refused, with what to provide, and nothing mounted", () => {
    const text = manifest(workload("Deployment", { containers: [{ name: "app", image: "x" }] }));
    expect(inject(text)).toEqual({
      text,
      warnings: [
        "deployment/web: no container declares a TCP containerPort, so lastcall cannot tell which ports to put Envoy in front of: left as is (declare the app's ports, or write your listeners in a ConfigMap and pass --config-map NAME)",
      ],
      notes: [],
      injected: 0,
      refused: 1,
    });
  });

  it("--config-map not in the manifest: mounted, nothing generated, a Service to the app is a warning", () => {
    const result = inject(manifest(shop(), service("shop", [{ port: 80, targetPort: 8080 }])), {
      ...SIDECAR_DEFAULTS,
      configMap: "mine",
    });
    const out = objects(result.text);
    expect(out.map((o) => o.kind)).toEqual(["Deployment", "Service"]);
    expect(specOf(out[0]).volumes).toEqual([{
      name: "lastcall-config",
      configMap: { name: "mine" },
    }]);
    expect(result.notes).toEqual([
      "deployment/shop: Envoy config is your ConfigMap mine, not in this manifest: Services not rewired, listeners not checked",
      "deployment/shop: the app waits for Envoy to be ready at start (ConfigMap mine is not in this manifest, so its listeners may carry the app's calls out; --hold-app never to start it at once)",
    ]);
    expect(result.warnings).toEqual([
      `deployment/shop: service/shop port 80 targetPort 8080 reaches container "app" port 8080 directly (bypasses lastcall): its requests are not counted and not drained; point it at an Envoy listener that forwards to the app`,
    ]);
  });

  it("a ConfigMap of the generated name in the manifest is the user's: kept as is, its listeners used", () => {
    const own = {
      apiVersion: "v1",
      kind: "ConfigMap",
      metadata: { name: "shop-lastcall-envoy" },
      data: { "envoy.yaml": "# mine\n" },
    };
    const generated = objects(inject(manifest(shop())).text)[1];
    own.data["envoy.yaml"] += generated.data["envoy.yaml"].replace(
      "port_value: 18080",
      "port_value: 7000",
    );
    const text = manifest(shop(), own, service("shop", [{ port: 80, targetPort: 8080 }]));
    const result = inject(text);
    const out = objects(result.text);
    expect(out.map((o) => o.kind)).toEqual(["Deployment", "ConfigMap", "Service"]);
    expect(out[1]).toEqual(own);
    expect(out[2].spec.ports).toEqual([{ port: 80, targetPort: 7000 }]);
    expect(result.warnings).toEqual([]);
  });

  it("Services of another namespace or selecting other pods are left alone", () => {
    const inShop = { ...shop(), metadata: { name: "shop", namespace: "shop" } };
    const other = {
      ...service("other", [{ port: 8080 }]),
      spec: { selector: { app: "other" }, ports: [{ port: 8080 }] },
    };
    const text = manifest(
      inShop,
      service("elsewhere", [{ port: 8080 }], { namespace: "other" }),
      other,
      service("unset", [{ port: 8080 }]),
    );
    const out = objects(inject(text).text);
    expect(out.slice(2).map((o) => [o.metadata.name, o.spec.ports])).toEqual([
      ["elsewhere", [{ port: 8080 }]],
      ["other", [{ port: 8080 }]],
      // No namespace: `kubectl apply -n shop` puts it beside the pods.
      ["unset", [{ port: 8080, targetPort: 18080 }]],
    ]);
    expect(out[1].metadata).toEqual({
      name: "shop-lastcall-envoy",
      namespace: "shop",
      annotations: { "lastcall/workload": "Deployment/shop" },
    });
  });
});

describe("workloads of one name", () => {
  const portless = podSpec({ containers: [{ name: "app", image: "example/app:1" }] });
  const eachOwn = [
    "Deployment/web",
    "ConfigMap/web-lastcall-envoy",
    "Job/web",
    "ConfigMap/web-job-lastcall-envoy",
  ];

  it("a Deployment and a Job `web` each get their own ConfigMap", () => {
    const out = objects(inject(manifest(workload("Deployment"), workload("Job"))).text);
    expect(out.map((o) => `${o.kind}/${o.metadata.name}`)).toEqual(eachOwn);
  });

  it("one without ports does not take the other's ConfigMap on a second inject", () => {
    for (const [first, second] of [["Job", "Deployment"], ["Deployment", "Job"]]) {
      const text = manifest(workload(first, portless), workload(second));
      const once = inject(text);
      expect(once.refused).toBe(1);
      const twice = inject(once.text);
      expect(twice.text).toBe(once.text);
      expect(twice.warnings[0]).toMatch(/no container declares a TCP containerPort/);
    }
  });

  it("a ConfigMap written for another workload is not mistaken for the user's", () => {
    const deployment = inject(manifest(workload("Deployment"))).text;
    const out = objects(inject(`${deployment}---\n${YAML.stringify(workload("Job"))}`).text);
    expect(out.map((o) => `${o.kind}/${o.metadata.name}`)).toEqual(eachOwn);
  });

  it("a name YAML 1.1 reads as a boolean is refused, saying so, not taken for a twin", () => {
    const text = manifest(workload("CronJob"), workload("CronJob"))
      .replace(/name: web\n/, "name: n\n").replace(/name: web\n/, "name: y\n");
    const result = inject(text);
    expect(result.text).toBe(text);
    expect(result.refused).toBe(2);
    expect(result.warnings).toEqual(
      [false, true].map((value) =>
        `cronjob/unnamed: metadata.name is read as ${value}, not a string: Kubernetes reads YAML ` +
        "1.1, where an unquoted y, n, yes, no, on or off is a boolean (quote it): left as is"
      ),
    );
  });

  it("two objects of one kind and name are refused, each named", () => {
    const text = manifest(workload("Pod", portless), workload("Pod"));
    const result = inject(text);
    expect(result.text).toBe(text);
    expect(result.refused).toBe(2);
    expect(result.warnings).toEqual([
      "pod/web: Pod/web is 2 times in this manifest (the API keeps one): left as is",
      "pod/web: Pod/web is 2 times in this manifest (the API keeps one): left as is",
    ]);
  });
});

describe("the input's format", () => {
  it("JSON in: the ConfigMap is a JSON document after the workload", () => {
    const text = `${JSON.stringify(shop(), null, 2)}\n`;
    const out = inject(text).text;
    const [deployment, configMap] = out.split(/\n(?=\{)/).map((part) => JSON.parse(part));
    expect([deployment.kind, configMap.kind, configMap.metadata.name]).toEqual([
      "Deployment",
      "ConfigMap",
      "shop-lastcall-envoy",
    ]);
  });

  it("JSON in: the ports inject rewires are the ones it names, as from YAML", () => {
    const objectsIn = [
      shop({ readinessProbe: { httpGet: { path: "/ready", port: 8080 } } }),
      service("shop", [{ name: "web", port: 80, targetPort: 8080 }, { name: "admin", port: 9090 }]),
    ];
    const yaml = inject(manifest(...objectsIn));
    const json = inject(objectsIn.map((o) => JSON.stringify(o, null, 2)).join("\n"));
    const out = json.text.split(/\n(?=\{)/).map((part) => JSON.parse(part));
    expect(out).toEqual(objects(yaml.text));
    expect(json.warnings).toEqual(yaml.warnings);
    expect(out[0].spec.template.spec.containers[0].readinessProbe.httpGet.port).toBe(18080);
    expect(out[2].spec.ports.map((p: Json) => p.targetPort)).toEqual([18080, 19090]);
  });

  it("a long workload name: the ConfigMap's name is cut to what the API takes, with a hash", () => {
    const long = (c: string) => workload("Deployment", podSpec(), `${"a".repeat(240)}${c}`);
    const [a, b] = ["x", "y"].map((c) => objects(inject(manifest(long(c))).text)[1].metadata.name);
    expect(a).toMatch(/^a+-[0-9a-f]{8}-lastcall-envoy$/);
    expect(a.length).toBeLessThanOrEqual(253 - "-statefulset".length);
    expect(b).not.toBe(a);
  });

  it("a List: the ConfigMap is the item after the workload", () => {
    const text = YAML.stringify({
      apiVersion: "v1",
      kind: "List",
      items: [shop(), service("shop", [{ port: 80, targetPort: 8080 }])],
    });
    const [list] = objects(inject(text).text);
    expect(list.items.map((o: Json) => o.kind)).toEqual(["Deployment", "ConfigMap", "Service"]);
    expect(list.items[2].spec.ports).toEqual([{ port: 80, targetPort: 18080 }]);
  });
});

describe("check: how requests reach a pod's lastcall", () => {
  const injected = inject(manifest(shop())).text;

  it("a Service that reaches the app's port directly is a finding, with the listener to use", () => {
    const report = checkReport(
      `${injected}---\n${
        YAML.stringify(
          service("shop", [{ port: 80, targetPort: 9090 }, { port: 81, targetPort: "http-app" }]),
        )
      }`,
    );
    expect(report[0].findings.filter((f) => f.includes("bypasses"))).toEqual([
      `service/shop port 80 targetPort 9090 reaches container "app" port 9090 directly (bypasses lastcall): its requests are not counted and not drained; set targetPort: 19090 (lastcall's listener for it)`,
      `service/shop port 81 targetPort http-app reaches container "app" port 8080 directly (bypasses lastcall): its requests are not counted and not drained; set targetPort: 18080 (lastcall's listener for it)`,
    ]);
  });

  it("a declared app port that no inbound listener forwards to is a finding", () => {
    const text = injected.replace("port_value: 9090", "port_value: 9999");
    expect(checkReport(text)[0].findings.filter((f) => f.includes("no listener"))).toEqual([
      `lastcall has no listener forwarding to container "app" port 9090 (ConfigMap shop-lastcall-envoy): requests to it cannot go through lastcall and are not drained; add an inbound listener to 127.0.0.1:9090 (lastcall inject writes one per declared port)`,
    ]);
  });

  it("a ConfigMap not in the manifest: a note that the listeners were not checked", () => {
    const text = objects(injected).filter((o) => o.kind !== "ConfigMap").map((o) =>
      YAML.stringify(o)
    ).join("---\n");
    expect(checkReport(text)[0].notes).toEqual([
      "lastcall's Envoy config (ConfigMap shop-lastcall-envoy, not in this manifest): its listeners were not checked against the app ports",
    ]);
  });
});
