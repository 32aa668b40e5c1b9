// `lastcall check` on hand-built pods: Istio's sidecars, Contour's Envoy DaemonSet, pods without
// a proxy, manifests with nothing to flag, and Go durations as check reads them. lastcall's own
// sidecars are in check-lastcall.test.ts.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import YAML from "yaml";
import { formatFlagDuration, goDurationMs } from "../../agent/k8s/timing.ts";
import { manifest, workload } from "./workloads.ts";
import { app, deployment, lastcall, lines } from "./check-support.ts";
import type { Json } from "../support/json.ts";
import { root } from "../support/paths.ts";

const fixture = (name: string) =>
  readFileSync(new URL(`fixtures/${name}`, import.meta.url), "utf8");
const istio = (config?: string) => ({
  "sidecar.istio.io/inject": "true",
  ...(config && { "proxy.istio.io/config": config }),
});
/** The Contour fixture with its shutdown preStop and Envoy preStop replaced. */
const contour = (edit: (containers: Json[]) => void) => {
  const object = YAML.parse(fixture("contour-envoy.yaml"));
  edit(object.spec.template.spec.containers);
  return manifest(object);
};

describe("Istio sidecars", () => {
  it("the typical one: a 5 s drain with a 30 s app shutdown is flagged, with the fix", () => {
    expect(lines(fixture("istio-sidecar.yaml"))).toEqual([
      'deployment/web: istio-proxy terminationDrainDuration 5s (default) is shorter than the app\'s shutdown (preStop sleep 30s): the proxy stops while the app still calls out; set proxy.istio.io/config terminationDrainDuration ≥ 35s or run istio-proxy as a native sidecar (sidecar.istio.io/nativeSidecar: "true"; stops after the app) or use lastcall (waits for the app)',
    ]);
  });

  it.each([
    {
      name:
        "terminationDrainDuration from the annotation, with a grace period too short for the fix",
      text: deployment({ containers: [app(30)] }, istio("terminationDrainDuration: 5s")),
      findings: [
        'deployment/web: istio-proxy terminationDrainDuration 5s is shorter than the app\'s shutdown (preStop sleep 30s): the proxy stops while the app still calls out; set proxy.istio.io/config terminationDrainDuration ≥ 35s and terminationGracePeriodSeconds ≥ 35 or run istio-proxy as a native sidecar (sidecar.istio.io/nativeSidecar: "true"; stops after the app) or use lastcall (waits for the app)',
        'deployment/web: container "app" preStop sleep 30s leaves less than 5s of terminationGracePeriodSeconds 30 for its shutdown: the kubelet kills it mid-shutdown; set terminationGracePeriodSeconds ≥ 35',
      ],
    },
    {
      name: "TERMINATION_DRAIN_DURATION_SECONDS on the istio-proxy container",
      text: deployment({
        terminationGracePeriodSeconds: 60,
        containers: [app(30), {
          name: "istio-proxy",
          image: "istio/proxyv2:1.22.0",
          env: [{ name: "TERMINATION_DRAIN_DURATION_SECONDS", value: "5" }],
        }],
      }),
      findings: [
        'deployment/web: istio-proxy TERMINATION_DRAIN_DURATION_SECONDS 5s is shorter than the app\'s shutdown (preStop sleep 30s): the proxy stops while the app still calls out; set TERMINATION_DRAIN_DURATION_SECONDS ≥ 35 or run istio-proxy as a native sidecar (sidecar.istio.io/nativeSidecar: "true"; stops after the app) or use lastcall (waits for the app)',
      ],
    },
    {
      name: "an app without preStop gets SIGTERM while the proxy still forwards",
      text: deployment({ containers: [app()] }, istio()),
      findings: [
        'deployment/web: container "app" has no preStop: it gets SIGTERM at once while istio-proxy still takes new requests until terminationDrainDuration 5s (default): the app stops answering requests the proxy forwards; add lifecycle.preStop.sleep.seconds: 5 on container "app"',
      ],
    },
    {
      name: "EXIT_ON_ZERO_ACTIVE_CONNECTIONS with a MINIMUM_DRAIN_DURATION inside endpoint removal",
      text: deployment(
        { containers: [app(5)] },
        istio(
          "proxyMetadata:\n  EXIT_ON_ZERO_ACTIVE_CONNECTIONS: 'true'\n  MINIMUM_DRAIN_DURATION: 2s\n",
        ),
      ),
      findings: [
        // pilot-agent sleeps MINIMUM_DRAIN_DURATION, then polls the connections each second.
        "deployment/web: istio-proxy stops taking requests as early as 3s after termination starts (MINIMUM_DRAIN_DURATION 2s + the 1s poll), before endpoint removal is over (~3s): clients still routed to the pod are refused; set MINIMUM_DRAIN_DURATION ≥ 4s",
        'deployment/web: istio-proxy may exit as early as 3s after termination starts, at the first poll that finds no connection open (MINIMUM_DRAIN_DURATION 2s + the 1s poll), before the app\'s shutdown (preStop sleep 5s) is over: an app idle for a moment loses its proxy, and its calls out fail from then on; set MINIMUM_DRAIN_DURATION ≥ 9s or run istio-proxy as a native sidecar (sidecar.istio.io/nativeSidecar: "true"; stops after the app) or use lastcall (waits for the app)',
      ],
    },
    {
      name: "Envoy keeps listening (drainDuration) after the app stopped taking requests",
      text: deployment(
        { terminationGracePeriodSeconds: 40, containers: [app(30)] },
        istio("terminationDrainDuration: 35s\n"),
      ),
      findings: [
        'deployment/web: container "app" preStop sleep 30s ends while istio-proxy still takes new requests until terminationDrainDuration 35s: the app stops answering requests the proxy forwards; set lifecycle.preStop.sleep.seconds: 35 on container "app", or set proxy.istio.io/config drainDuration ≤ 30s',
      ],
    },
    {
      name: "terminationDrainDuration past the grace period",
      text: deployment(
        { containers: [app(10)] },
        istio("drainDuration: 10s\nterminationDrainDuration: 1m\n"),
      ),
      findings: [
        "deployment/web: istio-proxy terminationDrainDuration 1m is longer than terminationGracePeriodSeconds 30: the kubelet kills the proxy first; set proxy.istio.io/config terminationDrainDuration ≤ 30s or terminationGracePeriodSeconds ≥ 60",
      ],
    },
    {
      name:
        "a native istio-proxy without its preStop drain, whose drain starts after the app and ends past the grace period",
      text: deployment({
        containers: [app(25)],
        initContainers: [{
          name: "istio-proxy",
          image: "istio/proxyv2:1.22.0",
          restartPolicy: "Always",
        }],
      }),
      findings: [
        "deployment/web: istio-proxy is a native sidecar without a preStop drain: it starts draining only after the app has exited, so keep-alive clients keep sending requests the stopping app cannot answer; add lifecycle.preStop.exec.command: [pilot-agent, request, --debug-port=15020, POST, drain] (as Istio's injector writes it)",
        "deployment/web: istio-proxy is a native sidecar: its terminationDrainDuration 5s (default) starts after the app's shutdown (preStop sleep 25s) and ends past terminationGracePeriodSeconds 30: the kubelet kills it mid-drain; set terminationGracePeriodSeconds ≥ 35",
      ],
    },
    {
      name: "an annotation that is not YAML",
      text: deployment({ containers: [app(10)] }, istio("drainDuration: [\n")),
      findings: [
        "deployment/web: istio-proxy: cannot read its timings: proxy.istio.io/config is not YAML: Flow sequence in block collection must be sufficiently indented and end with a ]",
      ],
    },
  ])("$name", ({ text, findings }) => {
    expect(lines(text)).toEqual(findings);
  });
});

describe("Contour's Envoy DaemonSet", () => {
  it("as in Contour's example: with no connection open, Envoy stops at the first check, at once", () => {
    expect(lines(fixture("contour-envoy.yaml"))).toEqual([
      "daemonset/envoy: envoy stops taking requests as early as 0s after termination starts (contour envoy shutdown --drain-delay 0s, default), before endpoint removal is over (~3s): clients still routed to the pod are refused; set contour envoy shutdown --drain-delay ≥ 5s",
    ]);
  });

  it.each([
    {
      name: "the Envoy container without its preStop",
      edit: (c: Json[]) => delete c[1].lifecycle,
      findings: [
        "daemonset/envoy: shutdown-manager: no container's preStop calls GET :8090/shutdown: Envoy gets SIGTERM at once and exits without draining; add lifecycle.preStop.httpGet {path: /shutdown, port: 8090} to the Envoy container",
      ],
    },
    {
      name: "the preStop on the wrong port",
      edit: (c: Json[]) => (c[1].lifecycle.preStop.httpGet.port = 8091),
      findings: [
        "daemonset/envoy: envoy: preStop GET /shutdown goes to port 8091, but shutdown-manager serves --serve-port 8090: the hook fails at once and Envoy exits without draining; use port 8090",
      ],
    },
    {
      name: "the shutdown-manager without its shutdown preStop",
      edit: (c: Json[]) => delete c[0].lifecycle,
      findings: [
        "daemonset/envoy: shutdown-manager: no preStop runs `shutdown`: nobody writes the ready file, so Envoy's preStop GET /shutdown blocks until the kubelet kills the pod; add lifecycle.preStop.exec.command: [/bin/contour, envoy, shutdown] to shutdown-manager",
      ],
    },
    {
      name: "checks that start after the grace period",
      edit: (c: Json[]) =>
        c[0].lifecycle.preStop.exec.command.push("--drain-delay=10s", "--check-delay", "5m"),
      findings: [
        "daemonset/envoy: envoy contour envoy shutdown --drain-delay 10s + --check-delay 5m + --check-interval 5s is longer than terminationGracePeriodSeconds 300: the kubelet kills the proxy first; set terminationGracePeriodSeconds ≥ 315",
      ],
    },
  ])("$name", ({ edit, findings }) => {
    expect(lines(contour(edit))).toEqual(findings);
  });
});

describe("pods without a proxy", () => {
  it("a preStop that eats the whole grace period", () => {
    expect(lines(deployment({ containers: [app(30)] }))).toEqual([
      'deployment/web: container "app" preStop sleep 30s leaves less than 5s of terminationGracePeriodSeconds 30 for its shutdown: the kubelet kills it mid-shutdown; set terminationGracePeriodSeconds ≥ 35',
    ]);
  });
});

describe("clean manifests: no finding", () => {
  it.each([
    { name: "an app without preStop and no proxy", text: deployment({ containers: [app()] }) },
    {
      name: "an app with a sleep action",
      text: deployment({
        containers: [app(undefined, { lifecycle: { preStop: { sleep: { seconds: 10 } } } })],
      }),
    },
    {
      // The first poll (15 s) comes after the app's preStop (10 s) and shutdown (5 s).
      name: "Istio with EXIT_ON_ZERO_ACTIVE_CONNECTIONS, tuned as the chain says",
      text: deployment(
        { containers: [app(10)] },
        istio(
          "drainDuration: '10s'\nproxyMetadata:\n  MINIMUM_DRAIN_DURATION: '14s'\n  EXIT_ON_ZERO_ACTIVE_CONNECTIONS: 'true'\n",
        ),
      ),
    },
    {
      name: "Istio in sleep mode, tuned as the chain says",
      text: deployment(
        { terminationGracePeriodSeconds: 40, containers: [app(30)] },
        istio("drainDuration: 30s\nterminationDrainDuration: 35s\n"),
      ),
    },
    {
      name: "Istio opted out",
      text: deployment({ containers: [app()] }, { "sidecar.istio.io/inject": "false" }),
    },
    {
      name: "Contour with a 5 s --check-delay",
      text: contour((c) => c[0].lifecycle.preStop.exec.command.push("--check-delay", "5s")),
    },
    {
      name: "Contour's pair swapped for lastcall's drop-in",
      text: contour((c) => {
        c[0].command = ["lastcall"];
        c[0].args = ["shutdown-manager"];
        c[0].lifecycle.preStop.exec.command = [
          "lastcall",
          "shutdown",
          "--check-delay",
          "5s",
          "--check-interval",
          "200ms",
        ];
      }),
    },
    {
      name:
        "Contour's example DaemonSet with lastcall's image swapped in (examples/k8s/contour-envoy.yaml): lastcall run keeps Envoy up for --min-drain",
      text: readFileSync(
        join(root, "examples/k8s/contour-envoy.yaml"),
        "utf8",
      ),
    },
    {
      name: "lastcall classic with its defaults",
      text: deployment({ containers: [lastcall(["--grace", "30s"]), app(5)] }),
    },
    {
      name: "lastcall native with the preStop drain",
      text: deployment({
        containers: [app(5)],
        initContainers: [
          lastcall(["--grace", "30s"], {
            restartPolicy: "Always",
            lifecycle: { preStop: { exec: { command: ["lastcall", "drain"] } } },
          }),
        ],
      }),
    },
    {
      name:
        "a Job (behind no Service) whose app has no preStop, with a native sidecar without the drain hook",
      text: manifest(
        workload("Job", {
          containers: [app()],
          initContainers: [lastcall(["--grace", "30s"], { restartPolicy: "Always" })],
        }),
      ),
    },
    { name: "unknown kinds", text: "kind: Service\nmetadata: {name: web}\n---\nkind: ConfigMap\n" },
  ])("$name", ({ text }) => {
    expect(lines(text)).toEqual([]);
  });
});

describe("durations as Go's time.ParseDuration reads them (Istio's variables, Envoy Gateway's flags)", () => {
  it.each(
    [
      ["1m30s", 90_000],
      ["300ms", 300],
      ["1.5h", 5_400_000],
      [".5s", 500],
      ["5.s", 5000],
      ["1h2m3s4ms", 3_723_004],
      ["1500us", 2],
      ["0", 0],
      ["+0", 0],
      ["-5s", 0],
    ] as const,
  )("%s is %d ms", (text, ms) => {
    expect(goDurationMs(text)).toBe(ms);
  });

  it.each(["5", "5 s", "", "s", "1.5.5s", "5sec", "1d", "-", "."])("%j is not one", (text) => {
    expect(goDurationMs(text)).toBeUndefined();
  });

  it("reads back every duration a fix suggests (formatFlagDuration)", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 2 ** 31 - 1 }),
        (ms) => goDurationMs(formatFlagDuration(ms)) === ms,
      ),
    );
  });

  it("adds up the parts of a Go duration", () => {
    const unitMs = { h: 3_600_000, m: 60_000, s: 1000, ms: 1 } as const;
    const part = fc.record({
      n: fc.integer({ min: 0, max: 10_000 }),
      unit: fc.constantFrom(...(Object.keys(unitMs) as (keyof typeof unitMs)[])),
    });
    fc.assert(
      fc.property(fc.array(part, { minLength: 1, maxLength: 5 }), (parts) => {
        const text = parts.map(({ n, unit }) => `${n}${unit}`).join("");
        return goDurationMs(text) === parts.reduce((sum, { n, unit }) => sum + n * unitMs[unit], 0);
      }),
    );
  });
});
