// `lastcall inject` on hand-built workloads of every kind: the sidecar it adds in native and
// classic mode (lastcall exec around app commands, the binary's copy, warnings), and what it
// leaves alone. How it treats the manifest's text: inject-text.test.ts.
import { describe, expect, it } from "vitest";
import type { InjectOptions } from "../../agent/k8s/inject.ts";
import { VERSION } from "../../agent/version.ts";
import { unknownContainerFields, validateWorkload } from "./schema.ts";
import { KINDS, manifest, objects, podSpec, specOf, workload } from "./workloads.ts";
import { classic, inject, native } from "./inject-support.ts";

const heldClassic: InjectOptions = { ...classic, holdApp: "always" };
/** The app containers of an injected pod spec, in order (without lastcall's). */
// deno-lint-ignore no-explicit-any
const appsIn = (spec: any) =>
  spec.containers.filter((c: { name: string }) => c.name !== "lastcall");
const ready = {
  httpGet: { path: "/healthz/ready?wait_ms=2900", port: 15020 },
  timeoutSeconds: 3,
};
const live = { httpGet: { path: "/healthz/live", port: 15020 } };
const appStop = { httpGet: { path: "/v1/app-stop", port: 15020 } };
/** An app container as inject leaves it without a preStop of its own: with lastcall's. */
const withAppStop = (c: Record<string, unknown>) => ({ ...c, lifecycle: { preStop: appStop } });
const argsFor = (
  grace: string,
) => [
  "run",
  "--config",
  "/etc/envoy/envoy.yaml",
  "--grace",
  grace,
  "--status-address",
  "0.0.0.0",
  "--watch",
  "/etc/envoy/envoy.yaml",
];

describe("native mode: an init container with restartPolicy Always", () => {
  it.each(KINDS)("%s", (kind) => {
    const result = inject(manifest(workload(kind)));
    const [out] = objects(result.text);
    const spec = specOf(out);
    expect(result).toMatchObject({ injected: 1, warnings: [] });
    expect(spec.initContainers).toEqual([{
      name: "lastcall",
      image: `lastcall:${VERSION}`,
      args: argsFor("30s"),
      ports: [{ containerPort: 18080 }],
      restartPolicy: "Always",
      readinessProbe: { ...ready, periodSeconds: 1 },
      livenessProbe: live,
      lifecycle: {
        preStop: {
          exec: {
            command: [
              "sh",
              "-c",
              'read -r pid1 </proc/1/comm; if [ "$pid1" = lastcall ]; then kill -USR2 1; else exec lastcall drain; fi',
            ],
          },
        },
      },
      volumeMounts: [{ name: "lastcall-config", mountPath: "/etc/envoy", readOnly: true }],
    }]);
    expect(spec.containers).toEqual(podSpec().containers.map(withAppStop));
    expect(spec.volumes).toEqual([{
      name: "lastcall-config",
      configMap: { name: "web-lastcall-envoy" },
    }]);
    expect(() => validateWorkload(out)).not.toThrow();
    expect(unknownContainerFields(spec.initContainers[0])).toEqual([]);
  });

  it("comes after the pod's own init containers, so they run as before", () => {
    const spec = podSpec({ initContainers: [{ name: "migrate", image: "example/migrate:1" }] });
    const out = specOf(objects(inject(manifest(workload("Deployment", spec))).text)[0]);
    expect(out.initContainers.map((c: { name: string }) => c.name)).toEqual([
      "migrate",
      "lastcall",
    ]);
  });

  it("takes --grace from terminationGracePeriodSeconds", () => {
    const out = specOf(
      objects(
        inject(manifest(workload("Deployment", podSpec({ terminationGracePeriodSeconds: 45 }))))
          .text,
      )[0],
    );
    expect(out.initContainers[0].args).toEqual(argsFor("45s"));
  });

  it("caps --grace at what lastcall can time, with a line", () => {
    const result = inject(
      manifest(workload("Deployment", podSpec({ terminationGracePeriodSeconds: 2592000 }))),
    );
    expect(specOf(objects(result.text)[0]).initContainers[0].args).toEqual(argsFor("2147483s"));
    expect(result.warnings).toContain(
      "deployment/web: terminationGracePeriodSeconds 2592000 is longer than lastcall can time (2147483647ms, about 24.8 days): --grace 2147483s",
    );
  });

  it("uses --image and --config-map", () => {
    const out = specOf(
      objects(
        inject(manifest(workload("Pod")), {
          ...native,
          image: "registry.example/lastcall:9",
          configMap: "edge-envoy",
        }).text,
      )[0],
    );
    expect(out.initContainers[0].image).toBe("registry.example/lastcall:9");
    expect(out.volumes).toEqual([{ name: "lastcall-config", configMap: { name: "edge-envoy" } }]);
  });

  it("leaves Job commands alone: the kubelet stops a native sidecar when the app ends", () => {
    const out = specOf(objects(inject(manifest(workload("Job"))).text)[0]);
    expect(out.containers).toEqual(podSpec().containers.map(withAppStop));
  });
});

describe("classic mode: a container after the apps (first when held)", () => {
  it.each(KINDS)("%s", (kind) => {
    const result = inject(manifest(workload(kind)), classic);
    const [out] = objects(result.text);
    const spec = specOf(out);
    // Not held: after the app, whose container the kubelet then starts first.
    expect(spec.containers.map((c: { name: string }) => c.name)).toEqual(["app", "lastcall"]);
    expect(spec.containers[1]).toEqual({
      name: "lastcall",
      image: `lastcall:${VERSION}`,
      args: argsFor("30s"),
      ports: [{ containerPort: 18080 }],
      readinessProbe: { ...ready, periodSeconds: 1 },
      livenessProbe: live,
      volumeMounts: [{ name: "lastcall-config", mountPath: "/etc/envoy", readOnly: true }],
    });
    expect(spec.containers[0].lifecycle).toEqual({ preStop: appStop });
    expect(() => validateWorkload(out)).not.toThrow();
    expect(unknownContainerFields(spec.containers[1])).toEqual([]);
  });

  it.each([
    ["Job", workload("Job"), [], classic],
    ["CronJob", workload("CronJob"), [], classic],
    [
      "Pod with restartPolicy Never",
      workload("Pod", podSpec({ restartPolicy: "Never" })),
      [],
      classic,
    ],
    // Held (--hold-app always): the kubelet restarts a long-running app that ends, so its end
    // does not quit the proxy.
    ["held Deployment", workload("Deployment"), ["--no-quit"], heldClassic],
    ["held StatefulSet", workload("StatefulSet"), ["--no-quit"], heldClassic],
    ["held DaemonSet", workload("DaemonSet"), ["--no-quit"], heldClassic],
    ["held Pod", workload("Pod"), ["--no-quit"], heldClassic],
  ])(
    "a %s's app runs under lastcall exec %j, from a copy of the binary",
    (_, object, flags, options) => {
      const result = inject(manifest(object), options);
      const [out] = objects(result.text);
      const spec = specOf(out);
      expect(result.warnings).toEqual([]);
      // Held: first, its postStart hook holding the app's start; not held (a Job's): last.
      const order = options.holdApp === "always" ? ["lastcall", "app"] : ["app", "lastcall"];
      expect(spec.containers.map((c: { name: string }) => c.name)).toEqual(order);
      expect(appsIn(spec)[0]).toEqual({
        name: "app",
        image: "example/app:1",
        command: ["/lastcall/bin/lastcall", "exec", ...flags, "--", "./server"],
        args: ["--port", "8080"],
        ports: [{ containerPort: 8080 }],
        lifecycle: { preStop: appStop },
        volumeMounts: [{ name: "lastcall-bin", mountPath: "/lastcall/bin", readOnly: true }],
      });
      expect(spec.initContainers).toEqual([{
        name: "lastcall-install",
        image: `lastcall:${VERSION}`,
        command: ["cp", "/usr/local/bin/lastcall", "/lastcall/bin/lastcall"],
        volumeMounts: [{ name: "lastcall-bin", mountPath: "/lastcall/bin" }],
      }]);
      expect(spec.volumes).toEqual([{
        name: "lastcall-config",
        configMap: { name: "web-lastcall-envoy" },
      }, { name: "lastcall-bin", emptyDir: {} }]);
      expect(() => validateWorkload(out)).not.toThrow();
    },
  );

  it("a held Deployment container without a command is not wrapped, with a warning naming it", () => {
    const spec = podSpec({
      containers: [{ name: "web", image: "example/web:1", ports: [{ containerPort: 80 }] }],
    });
    const result = inject(manifest(workload("Deployment", spec, "shop")), heldClassic);
    expect(appsIn(specOf(objects(result.text)[0]))[0]).toEqual(
      withAppStop({ name: "web", image: "example/web:1", ports: [{ containerPort: 80 }] }),
    );
    expect(result.warnings).toEqual([
      'deployment/shop: container "web" has no command: not wrapped with lastcall exec, so on termination the sidecar cannot wait for it to exit and its calls out after the last request in flight may fail (set its command, add --app-port to the sidecar, or use --mode native)',
    ]);
  });

  it("two wrapped (held) Deployment containers get no warning: the drain waits for both", () => {
    const spec = podSpec({
      containers: [{ name: "a", image: "x", command: ["a"], ports: [{ containerPort: 80 }] }, {
        name: "b",
        image: "y",
        command: ["b"],
      }],
    });
    const result = inject(manifest(workload("Deployment", spec, "pair")), heldClassic);
    expect(result.warnings).toEqual([]);
    expect(
      appsIn(specOf(objects(result.text)[0])).map((c: { command: string[] }) => c.command),
    ).toEqual([
      ["/lastcall/bin/lastcall", "exec", "--no-quit", "--", "a"],
      ["/lastcall/bin/lastcall", "exec", "--no-quit", "--", "b"],
    ]);
  });

  it("a Job container without a command is not wrapped, with a warning naming it", () => {
    const spec = podSpec({
      containers: [{ name: "report", image: "example/report:1", ports: [{ containerPort: 80 }] }],
    });
    const result = inject(manifest(workload("Job", spec, "nightly")), classic);
    const out = specOf(objects(result.text)[0]);
    expect(appsIn(out)[0]).toEqual(withAppStop(spec.containers[0]));
    expect(out.initContainers).toBeUndefined();
    expect(result.warnings).toEqual([
      'job/nightly: container "report" has no command: not wrapped with lastcall exec, so the sidecar keeps running after it ends (set its command, or use --mode native)',
    ]);
  });

  it("a Job command already under lastcall exec (the image has lastcall) is kept, with no copy", () => {
    const spec = podSpec({
      containers: [{
        name: "app",
        image: "x",
        command: ["/usr/local/bin/lastcall", "exec", "--", "./job"],
        ports: [{ containerPort: 80 }],
      }],
    });
    const out = specOf(objects(inject(manifest(workload("Job", spec)), classic).text)[0]);
    expect(appsIn(out)[0]).toEqual(withAppStop(spec.containers[0]));
    expect(out.initContainers).toBeUndefined();
    expect(out.volumes).toEqual([{
      name: "lastcall-config",
      configMap: { name: "web-lastcall-envoy" },
    }]);
  });

  it("two wrapped Job containers get a warning: the first to end starts the proxy's termination", () => {
    const spec = podSpec({
      containers: [{ name: "a", image: "x", command: ["a"], ports: [{ containerPort: 80 }] }, {
        name: "b",
        image: "y",
        command: ["b"],
      }],
    });
    const result = inject(manifest(workload("Job", spec, "pair")), classic);
    expect(result.warnings).toEqual([
      "job/pair: 2 app containers run under lastcall exec: the first to end starts the proxy's termination, which waits for the others at most --grace (use --mode native)",
    ]);
  });
});

describe("what inject leaves alone", () => {
  it.each(["native", "classic"] as const)(
    "its own output (%s): the same bytes, nothing injected",
    (mode) => {
      const once = inject(manifest(...KINDS.map((k) => workload(k))), { ...native, mode });
      const twice = inject(once.text, { ...native, mode });
      expect(once.injected).toBe(KINDS.length);
      expect(twice).toEqual({ text: once.text, warnings: [], notes: [], injected: 0, refused: 0 });
    },
  );

  it("unknown kinds, byte for byte (comments, quoting, markers)", () => {
    const text = [
      "# the service\napiVersion: v1\nkind: Service\nmetadata: {name: web}   # flow style\nspec:\n  ports:\n  - port: 80\n",
      "---\nkind: ConfigMap\ndata:\n  envoy.yaml: |\n    static_resources: {}\n  'quoted': \"yes\"\n...\n",
      "--- # empty document\n",
    ].join("");
    expect(inject(text)).toEqual({ text, warnings: [], notes: [], injected: 0, refused: 0 });
  });

  it.each(["", "# nothing yet\n", "---\n"])("a manifest without workloads: %j", (text) => {
    expect(inject(text)).toEqual({ text, warnings: [], notes: [], injected: 0, refused: 0 });
  });

  it("a pod with a container named lastcall (injected by hand)", () => {
    const spec = podSpec({
      containers: [
        { name: "lastcall", image: "mine:1", args: ["run", "--config", "/x.yaml"] },
        ...podSpec().containers,
      ],
    });
    const text = manifest(workload("Deployment", spec), workload("Job", podSpec(), "other"));
    const result = inject(text);
    expect(result.injected).toBe(1);
    expect(result.text.startsWith(manifest(workload("Deployment", spec)))).toBe(true);
  });

  it("a pod whose grace period is too short for lastcall's drain, with a warning", () => {
    const text = manifest(workload("Deployment", podSpec({ terminationGracePeriodSeconds: 5 })));
    expect(inject(text)).toEqual({
      text,
      warnings: [
        "deployment/web: terminationGracePeriodSeconds 5 leaves lastcall no time to drain (it needs at least 8): left as is",
      ],
      notes: [],
      injected: 0,
      refused: 1,
    });
  });

  it.each([
    {
      name: "a negative grace period, the API server's 1 s: too short",
      text: manifest(workload("Deployment", podSpec({ terminationGracePeriodSeconds: -1 }))),
      line:
        "deployment/web: terminationGracePeriodSeconds -1 (the API server makes it 1) leaves lastcall no time to drain (it needs at least 8): left as is",
    },
    {
      name: "a volume of the name lastcall mounts its config under",
      text: manifest(
        workload("Deployment", podSpec({ volumes: [{ name: "lastcall-config", emptyDir: {} }] })),
      ),
      line:
        "deployment/web: has a volume named lastcall-config, the name lastcall's Envoy config is mounted under: left as is (rename that volume)",
    },
    {
      name: "a ConfigMap of its name in the manifest without envoy.yaml",
      text: manifest(workload("Deployment"), {
        apiVersion: "v1",
        kind: "ConfigMap",
        metadata: { name: "web-lastcall-envoy" },
        data: { "envoy.json": "{}" },
      }),
      line:
        "deployment/web: ConfigMap web-lastcall-envoy in this manifest has no envoy.yaml, the file lastcall runs Envoy with: left as is (add it)",
    },
  ])("refuses $name, with one line", ({ text, line }) => {
    expect(inject(text)).toMatchObject({ text, warnings: [line], refused: 1 });
  });

  it("a kind it does not wire that carries a pod (a ReplicaSet, Argo's Rollout), with a line", () => {
    const replicaSet = { ...workload("Deployment"), kind: "ReplicaSet" };
    const rollout = {
      ...workload("Deployment"),
      apiVersion: "argoproj.io/v1alpha1",
      kind: "Rollout",
    };
    const text = manifest(replicaSet, rollout, {
      apiVersion: "v1",
      kind: "ConfigMap",
      metadata: { name: "c" },
    });
    expect(inject(text)).toEqual({
      text,
      warnings: [
        "replicaset/web: ReplicaSet is not a kind inject wires: left as is",
        "rollout/web: Rollout is not a kind inject wires: left as is",
      ],
      notes: [],
      injected: 0,
      refused: 0,
    });
  });

  it("a workload without containers, with a warning", () => {
    const text = manifest({
      apiVersion: "apps/v1",
      kind: "Deployment",
      metadata: { name: "empty" },
      spec: {},
    });
    expect(inject(text)).toEqual({
      text,
      warnings: ["deployment/empty: no containers at spec.template.spec.containers: left as is"],
      notes: [],
      injected: 0,
      refused: 1,
    });
  });
});
