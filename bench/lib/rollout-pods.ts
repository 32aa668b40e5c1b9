// The rollout benchmark's contenders as the pods their projects generate around one demo app:
// lastcall as `lastcall inject` prints the app as a user writes it, the native-sidecar floor, and
// the incumbents around the demo's Envoy listener and cluster (docs/benchmarks.md says how).
import { parse, parseAllDocuments, stringify } from "yaml";
import {
  demoConfigMaps,
  demoDeployment,
  inject,
  plainDeployment,
} from "../../test/support/kube-workload.ts";

/** The images a contender's pod runs (build/image.mjs's, plus the anchors image). */
export interface RolloutImages {
  lastcall: string;
  node: string;
  /** The Envoy base image with istio-agent, contour and envoy-gateway in /usr/local/bin. */
  anchors: string;
}

/** One contender of the rollout benchmark. */
export interface RolloutContender {
  id: string;
  label: string;
  /** What its pod is, and what differs from the project's defaults. */
  shape: string;
  /** The container whose JSON event lines are kept (lastcall's), if any. */
  agentContainer?: string;
  /** The whole manifest (ConfigMaps, Deployment, Service) to apply. */
  manifest(images: RolloutImages, options: PodOptions): Promise<string>;
}

// Parsed Kubernetes objects: their shape is the API's, checked by the API server on apply.
// deno-lint-ignore no-explicit-any
type Obj = Record<string, any>;

/** What every contender's pod shares. */
export interface PodOptions {
  replicas: number;
  graceS: number;
  /** The app container's preStop `sleep` in seconds; 0: none. */
  appPreStopS: number;
}

/** The demo's listener and cluster (ConfigMap lastcall-demo-envoy), as a bootstrap object. */
function demoStaticResources(): Obj {
  const envoyMap = parseAllDocuments(demoConfigMaps()).map((d) => d.toJS() as Obj).find((o) =>
    o?.metadata?.name === "lastcall-demo-envoy"
  );
  if (!envoyMap) throw new Error("examples/k8s/pod-demo.yaml has no ConfigMap lastcall-demo-envoy");
  return parse(envoyMap.data["envoy.yaml"]) as Obj;
}

/** A bootstrap: the demo's static resources plus `admin` (what the tool needs to reach Envoy). */
function bootstrap(admin: Obj): string {
  return JSON.stringify({ ...demoStaticResources(), admin });
}

/** The ConfigMap of the incumbents' bootstraps (lastcall's is the demo's own, lastcall-demo-envoy). */
function bootstrapsConfigMap(): Obj {
  return {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: { name: "rollout-envoy" },
    data: {
      // pilot-agent's sidecar bootstrap has its admin on 127.0.0.1:15000.
      "istio.json": bootstrap({
        address: { socket_address: { address: "127.0.0.1", port_value: 15000 } },
      }),
      // Contour's `contour bootstrap`: admin on a Unix socket shared with the shutdown-manager.
      "contour.json": bootstrap({ address: { pipe: { path: "/admin/admin.sock", mode: 420 } } }),
      // Envoy Gateway's bootstrap: admin on 127.0.0.1:19000, access log to /dev/null.
      "gateway.json": bootstrap({
        access_log: [{
          name: "envoy.access_loggers.file",
          typed_config: {
            "@type": "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog",
            path: "/dev/null",
          },
        }],
        address: { socket_address: { address: "127.0.0.1", port_value: 19000 } },
      }),
    },
  };
}

/** The demo Deployment and Service, the app's preStop as `options` says. */
function demoObjects(
  images: RolloutImages,
  options: PodOptions,
): { deployment: Obj; service: Obj; text: string } {
  const text = demoDeployment({
    nodeImage: images.node,
    replicas: options.replicas,
    grace: options.graceS,
    preStopSeconds: options.appPreStopS,
  });
  const objects = parseAllDocuments(text).map((d) => d.toJS() as Obj);
  return {
    deployment: objects.find((o) => o.kind === "Deployment")!,
    service: objects.find((o) => o.kind === "Service")!,
    text,
  };
}

function documents(objects: Obj[]): string {
  return objects.map((o) => `---\n${stringify(o)}`).join("");
}

const POD_NAME_ENV = {
  name: "ENVOY_POD_NAME",
  valueFrom: { fieldRef: { apiVersion: "v1", fieldPath: "metadata.name" } },
};

/** A pod of the app plus `containers` (and `volumes`), the Deployment otherwise as the demo's. */
function withSidecars(
  images: RolloutImages,
  options: PodOptions,
  containers: Obj[],
  volumes: Obj[],
): string {
  const { deployment, service } = demoObjects(images, options);
  const spec = deployment.spec.template.spec;
  spec.containers = [...containers, ...spec.containers];
  spec.volumes = [
    ...spec.volumes,
    { name: "rollout-envoy", configMap: { name: "rollout-envoy" } },
    ...volumes,
  ];
  return documents([bootstrapsConfigMap(), deployment, service]);
}

/** The app as a user writes it (on 0.0.0.0:8080, Service `demo` to 8080), the preStop as `options` says. */
function plainObjects(images: RolloutImages, options: PodOptions): string {
  return plainDeployment({
    nodeImage: images.node,
    replicas: options.replicas,
    grace: options.graceS,
    preStopSeconds: options.appPreStopS,
  });
}

/**
 * lastcall, as `lastcall inject` prints it for the app as a user writes it, on the defaults
 * (native; classic: `--mode classic`): inject makes the Envoy ConfigMap and points the Service
 * at Envoy; only the app's code (ConfigMap lastcall-demo-app) is applied beside it.
 */
function lastcall(mode: "native" | "classic"): RolloutContender {
  return {
    id: `lastcall-${mode}`,
    label: `lastcall inject${mode === "classic" ? " --mode classic" : ""}`,
    agentContainer: "lastcall",
    shape: mode === "native"
      ? "`lastcall inject` default output for the app on :8080 (Service to 8080): native sidecar (init container, restartPolicy Always) with a liveness probe on :15020 (no readiness probe of its own: the app's readiness probe goes to Envoy's listener 18080) and a preStop shell line that sends lastcall (PID 1) SIGUSR2 (`lastcall drain` where lastcall is not PID 1); the app's preStop (when it has none) `GET :15020/v1/app-stop`, answered once Envoy has stopped after its last byte (the generated config carries no calls out); the generated ConfigMap's listener on 18080 → 127.0.0.1:8080, the Service pointed at it"
      : "`lastcall inject --mode classic` default output for the same app: sidecar container after the app (readiness/liveness probes on :15020; no preStop: its SIGTERM starts the drain), the app's preStop (when it has none) `GET :15020/v1/app-stop`, answered as in native mode; the same generated ConfigMap and Service",
    async manifest(images, options) {
      const args = [
        "--image",
        images.lastcall,
        ...(mode === "classic" ? ["--mode", "classic"] : []),
      ];
      return `${demoConfigMaps()}---\n${await inject(plainObjects(images, options), args)}`;
    },
  };
}

/**
 * The floor Kubernetes' own native-sidecar ordering costs: the same app as a user writes it with a
 * native sidecar that only sleeps (no proxy, no probes, no hooks); the Service reaches the app.
 */
function nativeFloor(): RolloutContender {
  return {
    id: "native-floor",
    label: "native floor (sleep sidecar, no proxy)",
    shape:
      "the app as a user writes it (Service to :8080) plus a native sidecar running `sleep infinity` (no probes, no hooks): what a native sidecar costs a rollout before any proxy; the app is reached directly, so its failures are the app's own",
    manifest(images, options) {
      const objects = parseAllDocuments(plainObjects(images, options)).map((d) => d.toJS() as Obj);
      const deployment = objects.find((o) => o.kind === "Deployment")!;
      deployment.spec.template.spec.initContainers = [
        {
          name: "sleeper",
          image: images.node,
          imagePullPolicy: "Never",
          restartPolicy: "Always",
          command: ["sleep", "infinity"],
        },
      ];
      return Promise.resolve(`${demoConfigMaps()}${documents(objects)}`);
    },
  };
}

/**
 * Istio's agent code (bench/anchors/istio-agent: pilot-agent's pkg/envoy wiring) in an
 * `istio-proxy` container; the app has no preStop, as in Istio's injected pods.
 */
function istio(exitOnZero: boolean): RolloutContender {
  return {
    id: exitOnZero ? "istio-exit-on-zero" : "istio-default",
    label: exitOnZero
      ? "Istio agent, EXIT_ON_ZERO_ACTIVE_CONNECTIONS=true"
      : "Istio agent, defaults",
    shape: `\`istio-proxy\` container running Istio's pkg/envoy agent (drain, then ${
      exitOnZero
        ? "MINIMUM_DRAIN_DURATION 5 s and poll downstream_cx_active every 1 s"
        : "sleep TERMINATION_DRAIN_DURATION 5 s"
    }, then kill Envoy); no preStop hooks`,
    manifest(images, options) {
      return Promise.resolve(`${demoConfigMaps()}${
        withSidecars(images, options, [{
          name: "istio-proxy",
          image: images.anchors,
          imagePullPolicy: "Never",
          command: [
            "istio-agent",
            "--envoy",
            "/usr/local/bin/envoy",
            "--config",
            "/etc/istio/proxy/istio.json",
            "--admin-port",
            "15000",
            ...(exitOnZero ? ["--exit-on-zero"] : []),
          ],
          volumeMounts: [{ name: "rollout-envoy", mountPath: "/etc/istio/proxy", readOnly: true }],
        }], [])
      }`);
    },
  };
}

/** Contour's Envoy pod (examples/contour/03-envoy.yaml of v1.33): shutdown-manager beside Envoy, admin on a shared socket. */
function contour(): RolloutContender {
  return {
    id: "contour",
    label: "Contour shutdown-manager pair",
    shape:
      "`shutdown-manager` (`contour envoy shutdown-manager`, preStop `contour envoy shutdown`) + `envoy` (preStop GET :8090/shutdown), admin on /admin/admin.sock",
    manifest(images, options) {
      return Promise.resolve(`${demoConfigMaps()}${
        withSidecars(images, options, [
          {
            name: "shutdown-manager",
            image: images.anchors,
            imagePullPolicy: "Never",
            command: ["contour"],
            args: ["envoy", "shutdown-manager"],
            lifecycle: { preStop: { exec: { command: ["contour", "envoy", "shutdown"] } } },
            volumeMounts: [{ name: "envoy-admin", mountPath: "/admin" }],
          },
          {
            name: "envoy",
            image: images.anchors,
            imagePullPolicy: "Never",
            command: ["envoy"],
            args: [
              "-c",
              "/config/contour.json",
              "--service-cluster",
              "$(CONTOUR_NAMESPACE)",
              "--service-node",
              "$(ENVOY_POD_NAME)",
              "--log-level",
              "info",
            ],
            env: [{
              name: "CONTOUR_NAMESPACE",
              valueFrom: { fieldRef: { apiVersion: "v1", fieldPath: "metadata.namespace" } },
            }, POD_NAME_ENV],
            lifecycle: { preStop: { httpGet: { path: "/shutdown", port: 8090, scheme: "HTTP" } } },
            volumeMounts: [{ name: "rollout-envoy", mountPath: "/config", readOnly: true }, {
              name: "envoy-admin",
              mountPath: "/admin",
            }],
          },
        ], [{ name: "envoy-admin", emptyDir: {} }])
      }`);
    },
  };
}

/** Envoy Gateway v1.9.1's proxy pod (internal/infrastructure/kubernetes/proxy, testdata/deployments/default.yaml). */
function gateway(): RolloutContender {
  return {
    id: "envoy-gateway",
    label: "Envoy Gateway shutdown-manager pair",
    shape:
      "`shutdown-manager` (`envoy-gateway envoy shutdown-manager`, preStop `envoy-gateway envoy shutdown`) + `envoy` (preStop GET :19002/shutdown/ready; `--drain-strategy immediate --drain-time-s 60`)",
    manifest(images, options) {
      const env = [{
        name: "ENVOY_POD_NAMESPACE",
        valueFrom: { fieldRef: { apiVersion: "v1", fieldPath: "metadata.namespace" } },
      }, POD_NAME_ENV];
      return Promise.resolve(`${demoConfigMaps()}${
        withSidecars(images, options, [
          {
            name: "envoy",
            image: images.anchors,
            imagePullPolicy: "Never",
            command: ["envoy"],
            args: [
              "--service-cluster",
              "default",
              "--service-node",
              "$(ENVOY_POD_NAME)",
              "-c",
              "/config/gateway.json",
              "--log-level",
              "warn",
              "--cpuset-threads",
              "--drain-strategy",
              "immediate",
              "--component-log-level",
              "misc:error",
              "--drain-time-s",
              "60",
            ],
            env,
            lifecycle: {
              preStop: { httpGet: { path: "/shutdown/ready", port: 19002, scheme: "HTTP" } },
            },
            volumeMounts: [{ name: "rollout-envoy", mountPath: "/config", readOnly: true }],
          },
          {
            name: "shutdown-manager",
            image: images.anchors,
            imagePullPolicy: "Never",
            command: ["envoy-gateway"],
            args: ["envoy", "shutdown-manager"],
            env,
            lifecycle: { preStop: { exec: { command: ["envoy-gateway", "envoy", "shutdown"] } } },
            readinessProbe: {
              httpGet: { path: "/healthz", port: 19002, scheme: "HTTP" },
              periodSeconds: 10,
              failureThreshold: 3,
              timeoutSeconds: 1,
            },
          },
        ], [])
      }`);
    },
  };
}

/** Every contender, in the order they take turns. */
export const ROLLOUT_CONTENDERS: RolloutContender[] = [
  lastcall("native"),
  lastcall("classic"),
  nativeFloor(),
  istio(false),
  istio(true),
  contour(),
  gateway(),
];
