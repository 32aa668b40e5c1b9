// `lastcall check` on the incumbents' manifests in the shapes their projects ship (Istio,
// Contour, Envoy Gateway), with the exact findings expected for each.
import { join } from "node:path";
import YAML from "yaml";
import type { Json } from "../support/json.ts";
import {
  checkRows,
  CLASSIC_NO_PRESTOP,
  container,
  edited,
  fixturePath,
  NGINX,
  root,
  type Row,
} from "./check-rows.ts";

const sleepPreStop = (seconds: number) => ({
  preStop: { exec: { command: ["/bin/sh", "-c", `sleep ${seconds}`] } },
});

/**
 * Sets proxyMetadata the way Istio's injector writes it: in the pod's proxy.istio.io/config
 * annotation, in PROXY_CONFIG, and as variables of istio-proxy.
 */
function proxyMetadata(
  object: Json,
  values: Record<string, string>,
  config: Record<string, unknown> = {},
) {
  const annotations = object.spec.template.metadata.annotations;
  const annotated = YAML.parse(annotations["proxy.istio.io/config"] ?? "{}");
  const merged = {
    ...annotated,
    ...config,
    proxyMetadata: { ...annotated.proxyMetadata, ...values },
  };
  annotations["proxy.istio.io/config"] = YAML.stringify(merged);
  const proxy = container(object, "istio-proxy");
  proxy.env.find((e: { name: string }) => e.name === "PROXY_CONFIG").value = `${
    JSON.stringify(merged)
  }\n`;
  for (const [name, value] of Object.entries(values)) {
    const existing = proxy.env.find((e: { name: string }) => e.name === name);
    if (existing) existing.value = value;
    else proxy.env.push({ name, value });
  }
}

const ISTIO_CLASSIC = fixturePath("istio-hello-classic.yaml");
const ISTIO_NATIVE = fixturePath("istio-hello-native.yaml");
const ISTIO_EXIT_ON_ZERO = fixturePath("istio-exit-on-zero.yaml");
const GATEWAY = fixturePath("envoy-gateway-default.yaml");
const GATEWAY_SHUTDOWN = fixturePath("envoy-gateway-shutdown.yaml");

const NATIVE_ISTIO =
  `or run istio-proxy as a native sidecar (sidecar.istio.io/nativeSidecar: "true"; stops after the app) or use lastcall (waits for the app)`;
const NATIVE_NO_PRESTOP =
  'deployment/hello: container "hello" has no preStop: it gets SIGTERM at once, before endpoint removal is over (~3s), while istio-proxy (a native sidecar) still takes new requests until the app has exited: the app stops answering requests the proxy forwards; add lifecycle.preStop.sleep.seconds: 5 on container "hello"';
const IDLE_EXIT = (minDrain: string, exitAt: string, fix: string) =>
  `deployment/hello: istio-proxy may exit as early as ${exitAt} after termination starts, at the first poll that finds no connection open (MINIMUM_DRAIN_DURATION ${minDrain} + the 1s poll), before the app's shutdown (preStop sleep 10s) is over: an app idle for a moment loses its proxy, and its calls out fail from then on; set MINIMUM_DRAIN_DURATION ≥ ${fix} ${NATIVE_ISTIO}`;

const rows: Row[] = [
  // Istio: the same app, in the layout Istio injected before 1.28 and in today's.
  {
    name: "Istio's older injected layout (istio-proxy a regular container), app without preStop",
    file: ISTIO_CLASSIC,
    findings: [CLASSIC_NO_PRESTOP],
    summary: "1 workload, 1 proxy, 1 finding",
  },
  {
    name:
      "Istio's native injected layout (since 1.28), app without preStop: its SIGTERM comes at once, whatever the sidecar does",
    file: ISTIO_NATIVE,
    findings: [NATIVE_NO_PRESTOP],
    summary: "1 workload, 1 proxy, 1 finding",
  },
  {
    name:
      "Istio's native layout, app with preStop sleep 5: none (the sidecar drains from its preStop and stops after the app)",
    text: () => edited(ISTIO_NATIVE, (o) => (container(o, "hello").lifecycle = sleepPreStop(5))),
    findings: [],
    summary: "1 workload, 1 proxy, 0 findings",
  },
  {
    name:
      "Istio's older layout, app with preStop sleep 5: terminationDrainDuration kills the proxy during the app's shutdown",
    text: () => edited(ISTIO_CLASSIC, (o) => (container(o, "hello").lifecycle = sleepPreStop(5))),
    findings: [
      `deployment/hello: istio-proxy terminationDrainDuration 5s (default) is shorter than the app's shutdown (preStop sleep 5s): the proxy stops while the app still calls out; set proxy.istio.io/config terminationDrainDuration ≥ 10s ${NATIVE_ISTIO}`,
    ],
    summary: "1 workload, 1 proxy, 1 finding",
  },
  {
    name: "Istio's native layout without its preStop drain",
    text: () => edited(ISTIO_NATIVE, (o) => delete container(o, "istio-proxy").lifecycle),
    findings: [
      "deployment/hello: istio-proxy is a native sidecar without a preStop drain: it starts draining only after the app has exited, so keep-alive clients keep sending requests the stopping app cannot answer; add lifecycle.preStop.exec.command: [pilot-agent, request, --debug-port=15020, POST, drain] (as Istio's injector writes it)",
      NATIVE_NO_PRESTOP,
    ],
    summary: "1 workload, 1 proxy, 2 findings",
  },
  {
    name:
      "Istio's native layout whose drain goes to Envoy's admin port (pilot-agent request without --debug-port)",
    text: () =>
      edited(ISTIO_NATIVE, (o) => {
        container(o, "istio-proxy").lifecycle.preStop.exec.command = [
          "pilot-agent",
          "request",
          "POST",
          "drain",
        ];
        container(o, "hello").lifecycle = sleepPreStop(5);
      }),
    findings: [
      "deployment/hello: istio-proxy's preStop `pilot-agent request POST drain` goes to port 15000 (--debug-port's default, Envoy's admin), where nothing serves /drain: the hook fails and the proxy starts draining only after the app has exited; add --debug-port=15020",
    ],
    summary: "1 workload, 1 proxy, 1 finding",
  },
  // Istio's EXIT_ON_ZERO_ACTIVE_CONNECTIONS and MINIMUM_DRAIN_DURATION (pkg/envoy/agent.go).
  {
    name:
      "EXIT_ON_ZERO_ACTIVE_CONNECTIONS with an app preStop of 10 s (istio issue 44690): the proxy may exit at 6 s",
    file: ISTIO_EXIT_ON_ZERO,
    findings: [IDLE_EXIT("5s (default)", "6s", "14s")],
    summary: "1 workload, 1 proxy, 1 finding",
  },
  {
    // The listeners close (drainDuration) when the app's preStop ends; the first poll comes
    // after the app's preStop and its shutdown.
    name:
      "EXIT_ON_ZERO with MINIMUM_DRAIN_DURATION 14s in proxyMetadata and drainDuration 10s: none",
    text: () =>
      edited(
        ISTIO_EXIT_ON_ZERO,
        (o) => proxyMetadata(o, { MINIMUM_DRAIN_DURATION: "14s" }, { drainDuration: "10s" }),
      ),
    findings: [],
    summary: "1 workload, 1 proxy, 0 findings",
  },
  {
    name: "EXIT_ON_ZERO with MINIMUM_DRAIN_DURATION 10s on istio-proxy's environment only",
    text: () =>
      edited(
        ISTIO_EXIT_ON_ZERO,
        (o) =>
          container(o, "istio-proxy").env.push({ name: "MINIMUM_DRAIN_DURATION", value: "10s" }),
      ),
    findings: [
      'deployment/hello: container "hello" preStop sleep 10s ends while istio-proxy still takes new requests until MINIMUM_DRAIN_DURATION 10s + the 1s poll: the app stops answering requests the proxy forwards; set lifecycle.preStop.sleep.seconds: 11 on container "hello", or set proxy.istio.io/config drainDuration ≤ 10s',
      IDLE_EXIT("10s", "11s", "14s"),
    ],
    summary: "1 workload, 1 proxy, 2 findings",
  },
  {
    name: 'EXIT_ON_ZERO with MINIMUM_DRAIN_DURATION "15": not a Go duration, pilot-agent keeps 5 s',
    text: () =>
      edited(ISTIO_EXIT_ON_ZERO, (o) => proxyMetadata(o, { MINIMUM_DRAIN_DURATION: "15" })),
    findings: [
      'deployment/hello: istio-proxy: MINIMUM_DRAIN_DURATION "15" is not a Go duration: pilot-agent ignores it and uses 5s; write it with a unit (15s)',
      IDLE_EXIT("5s (default)", "6s", "14s"),
    ],
    summary: "1 workload, 1 proxy, 2 findings",
  },
  {
    name:
      "EXIT_ON_ZERO with terminationDrainDuration 30s, as in istio issue 44690: it has no effect",
    text: () =>
      edited(ISTIO_EXIT_ON_ZERO, (o) => proxyMetadata(o, {}, { terminationDrainDuration: "30s" })),
    findings: [
      "deployment/hello: istio-proxy terminationDrainDuration 30s has no effect with EXIT_ON_ZERO_ACTIVE_CONNECTIONS: pilot-agent waits MINIMUM_DRAIN_DURATION 5s (default), then kills Envoy at the first poll that finds no connection open (istio issue 44690); set MINIMUM_DRAIN_DURATION instead",
      IDLE_EXIT("5s (default)", "6s", "14s"),
    ],
    summary: "1 workload, 1 proxy, 2 findings",
  },
  {
    name:
      'EXIT_ON_ZERO_ACTIVE_CONNECTIONS "enabled": not a Go boolean, pilot-agent waits terminationDrainDuration',
    text: () =>
      edited(
        ISTIO_EXIT_ON_ZERO,
        (o) => proxyMetadata(o, { EXIT_ON_ZERO_ACTIVE_CONNECTIONS: "enabled" }),
      ),
    findings: [
      'deployment/hello: istio-proxy: EXIT_ON_ZERO_ACTIVE_CONNECTIONS "enabled" is not a Go boolean: pilot-agent ignores it (false); write "true" or "false"',
      `deployment/hello: istio-proxy terminationDrainDuration 5s (default) is shorter than the app's shutdown (preStop sleep 10s): the proxy stops while the app still calls out; set proxy.istio.io/config terminationDrainDuration ≥ 15s ${NATIVE_ISTIO}`,
    ],
    summary: "1 workload, 1 proxy, 2 findings",
  },
  {
    name:
      "the same EXIT_ON_ZERO pod in the native layout: none (the drain hook ends Envoy only after the app)",
    text: () =>
      edited(ISTIO_NATIVE, (o) => {
        proxyMetadata(o, { EXIT_ON_ZERO_ACTIVE_CONNECTIONS: "true" });
        container(o, "hello").lifecycle = sleepPreStop(10);
      }),
    findings: [],
    summary: "1 workload, 1 proxy, 0 findings",
  },
  {
    name:
      "a Deployment marked for injection with EXIT_ON_ZERO and MINIMUM_DRAIN_DURATION in its annotation's proxyMetadata",
    text: () =>
      edited(NGINX, (o) => {
        o.spec.template.metadata.annotations = {
          "sidecar.istio.io/inject": "true",
          "proxy.istio.io/config":
            'proxyMetadata:\n  EXIT_ON_ZERO_ACTIVE_CONNECTIONS: "true"\n  MINIMUM_DRAIN_DURATION: 8s\n',
        };
        container(o, "nginx").lifecycle = sleepPreStop(10);
      }),
    findings: [
      `deployment/nginx-deployment: istio-proxy may exit as early as 9s after termination starts, at the first poll that finds no connection open (MINIMUM_DRAIN_DURATION 8s + the 1s poll), before the app's shutdown (preStop sleep 10s) is over: an app idle for a moment loses its proxy, and its calls out fail from then on; set MINIMUM_DRAIN_DURATION ≥ 14s ${NATIVE_ISTIO}`,
    ],
    summary: "1 workload, 1 proxy, 1 finding",
  },
  {
    name:
      "a Deployment marked for injection by the label sidecar.istio.io/inject (Istio reads labels and annotations)",
    text: () =>
      edited(NGINX, (o) => {
        o.spec.template.metadata.labels = {
          ...o.spec.template.metadata.labels,
          "sidecar.istio.io/inject": "true",
        };
        o.spec.template.metadata.annotations = {
          "proxy.istio.io/config":
            'proxyMetadata:\n  EXIT_ON_ZERO_ACTIVE_CONNECTIONS: "true"\n  MINIMUM_DRAIN_DURATION: 8s\n',
        };
        container(o, "nginx").lifecycle = sleepPreStop(10);
      }),
    findings: [
      `deployment/nginx-deployment: istio-proxy may exit as early as 9s after termination starts, at the first poll that finds no connection open (MINIMUM_DRAIN_DURATION 8s + the 1s poll), before the app's shutdown (preStop sleep 10s) is over: an app idle for a moment loses its proxy, and its calls out fail from then on; set MINIMUM_DRAIN_DURATION ≥ 14s ${NATIVE_ISTIO}`,
    ],
    summary: "1 workload, 1 proxy, 1 finding",
  },
  // Contour's Envoy DaemonSet.
  {
    name:
      "Contour's example Envoy DaemonSet: with no connection open, Envoy stops at the first check, at once",
    file: join(root, "test/k8s/fixtures/contour-envoy.yaml"),
    findings: [
      "daemonset/envoy: envoy stops taking requests as early as 0s after termination starts (contour envoy shutdown --drain-delay 0s, default), before endpoint removal is over (~3s): clients still routed to the pod are refused; set contour envoy shutdown --drain-delay ≥ 5s",
    ],
    summary: "1 workload, 1 proxy, 1 finding",
  },
  {
    name: "Contour's DaemonSet with lastcall's image (examples/k8s/contour-envoy.yaml): none",
    file: join(root, "examples/k8s/contour-envoy.yaml"),
    findings: [],
    summary: "1 workload, 1 proxy, 0 findings",
  },
  // Envoy Gateway's proxy (v1.9: envoy-gateway envoy shutdown-manager / shutdown).
  {
    name:
      "Envoy Gateway's proxy Deployment shape with its defaults (--min-drain-duration 10s, --drain-timeout 60s, grace 360 s): none",
    file: GATEWAY,
    findings: [],
    summary: "1 workload, 1 proxy, 0 findings",
  },
  {
    name:
      "Envoy Gateway's proxy shape with EnvoyProxy's shutdown settings (30s / 15s, --ready-timeout=40s, grace 330 s): none",
    file: GATEWAY_SHUTDOWN,
    findings: [],
    summary: "1 workload, 1 proxy, 0 findings",
  },
  {
    name: "Envoy Gateway with --min-drain-duration=2s: Envoy may stop within endpoint removal",
    text: () =>
      edited(
        GATEWAY,
        (o) =>
          container(o, "shutdown-manager").lifecycle.preStop.exec.command.push(
            "--min-drain-duration=2s",
          ),
      ),
    findings: [
      "deployment/envoy-default-37a8eec1: envoy stops taking requests as early as 2s after termination starts (--min-drain-duration 2s), before endpoint removal is over (~3s): clients still routed to the pod are refused; set envoy-gateway envoy shutdown --min-drain-duration ≥ 5s",
    ],
    summary: "1 workload, 1 proxy, 1 finding",
  },
  {
    name: "Envoy Gateway with --min-drain-duration=10 (no unit): the command refuses it",
    text: () =>
      edited(
        GATEWAY,
        (o) =>
          container(o, "shutdown-manager").lifecycle.preStop.exec.command.push(
            "--min-drain-duration=10",
          ),
      ),
    findings: [
      'deployment/envoy-default-37a8eec1: shutdown-manager: `envoy-gateway envoy shutdown` refuses --min-drain-duration "10" is not a Go duration (e.g. 10s): its preStop fails at once, so Envoy is not drained and its preStop GET /shutdown/ready blocks for --ready-timeout 610s (default)',
    ],
    summary: "1 workload, 1 proxy, 1 finding",
  },
  {
    name: "Envoy Gateway's shutdown-manager without its shutdown preStop",
    text: () => edited(GATEWAY, (o) => delete container(o, "shutdown-manager").lifecycle),
    findings: [
      "deployment/envoy-default-37a8eec1: shutdown-manager: no preStop runs `envoy-gateway envoy shutdown`: nothing drains Envoy or writes /tmp/shutdown-ready, so Envoy's preStop GET /shutdown/ready blocks for --ready-timeout 610s (default) and Envoy stops without a drain; add lifecycle.preStop.exec.command: [envoy-gateway, envoy, shutdown] to shutdown-manager",
    ],
    summary: "1 workload, 1 proxy, 1 finding",
  },
  {
    name: "Envoy Gateway's Envoy preStop on the wrong port",
    text: () =>
      edited(GATEWAY, (o) => (container(o, "envoy").lifecycle.preStop.httpGet.port = 19001)),
    findings: [
      "deployment/envoy-default-37a8eec1: envoy: preStop GET /shutdown/ready goes to port 19001, but Envoy Gateway's shutdown manager always serves 19002: the hook fails at once and Envoy exits without draining; use port 19002",
    ],
    summary: "1 workload, 1 proxy, 1 finding",
  },
  {
    name: "Envoy Gateway with --drain-timeout past the grace period",
    text: () =>
      edited(
        GATEWAY,
        (o) =>
          container(o, "shutdown-manager").lifecycle.preStop.exec.command.push(
            "--drain-timeout=400s",
          ),
      ),
    findings: [
      "deployment/envoy-default-37a8eec1: envoy --drain-timeout 400s is longer than terminationGracePeriodSeconds 360: the kubelet kills the proxy first; set envoy-gateway envoy shutdown --drain-timeout ≤ 6m or terminationGracePeriodSeconds ≥ 400",
    ],
    summary: "1 workload, 1 proxy, 1 finding",
  },
  {
    name: "Envoy Gateway with a --ready-timeout shorter than --drain-timeout",
    text: () =>
      edited(
        GATEWAY_SHUTDOWN,
        (
          o,
        ) => (container(o, "shutdown-manager").args = [
          "envoy",
          "shutdown-manager",
          "--ready-timeout=20s",
        ]),
      ),
    findings: [
      "deployment/envoy-default-37a8eec1: shutdown-manager --ready-timeout 20s is not longer than --drain-timeout 30s: Envoy's preStop gives up first and Envoy gets SIGTERM while connections still drain; set envoy-gateway envoy shutdown-manager --ready-timeout ≥ 40s (--drain-timeout + 10s, as Envoy Gateway writes it)",
    ],
    summary: "1 workload, 1 proxy, 1 finding",
  },
];

checkRows("lastcall check on the incumbents' manifests", rows);
