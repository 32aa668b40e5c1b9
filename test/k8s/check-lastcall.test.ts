// `lastcall check` on lastcall's own sidecars: the timings of a hand-written one (--grace,
// --min-drain, sleep mode, the native preStop drain), and what `lastcall inject` writes.
import { describe, expect, it } from "vitest";
import YAML from "yaml";
import { injectManifest } from "../../agent/k8s/inject.ts";
import { SIDECAR_DEFAULTS } from "../../agent/k8s/sidecar.ts";
import { KINDS, manifest, workload } from "./workloads.ts";
import { app, deployment, lastcall, lines } from "./check-support.ts";

describe("lastcall sidecars", () => {
  it.each([
    {
      name: "--grace longer than the pod's grace period",
      text: deployment({ containers: [lastcall(["--grace", "60s"]), app(5)] }),
      findings: [
        "deployment/web: lastcall --grace 1m is longer than terminationGracePeriodSeconds 30: the kubelet kills the proxy first; set --grace ≤ 30s or terminationGracePeriodSeconds ≥ 60",
      ],
    },
    {
      name: "classic: the drain deadline comes before the app's shutdown",
      text: deployment({ containers: [lastcall(["--grace", "30s"]), app(30)] }),
      findings: [
        "deployment/web: lastcall --grace 30s − --stop-margin 2s is shorter than the app's shutdown (preStop sleep 30s): the proxy stops while the app still calls out; set --grace ≥ 37s and terminationGracePeriodSeconds ≥ 37 or inject lastcall with --mode native (stops after the app)",
        'deployment/web: container "app" preStop sleep 30s leaves less than 5s of terminationGracePeriodSeconds 30 for its shutdown: the kubelet kills it mid-shutdown; set terminationGracePeriodSeconds ≥ 35',
      ],
    },
    {
      name: "native without the preStop drain",
      text: deployment({
        containers: [app(5)],
        initContainers: [lastcall(["--grace", "30s"], { restartPolicy: "Always" })],
      }),
      findings: [
        "deployment/web: lastcall is a native sidecar without a preStop `lastcall drain`: it starts draining only after the app has exited, so keep-alive clients keep sending requests the stopping app cannot answer; add lifecycle.preStop.exec.command: [lastcall, drain]",
      ],
    },
    {
      name: "--min-drain inside endpoint removal",
      text: deployment({ containers: [lastcall(["--min-drain=2s"]), app(5)] }),
      findings: [
        "deployment/web: lastcall stops taking requests as early as 2s after termination starts (--min-drain 2s), before endpoint removal is over (~3s): clients still routed to the pod are refused; set --min-drain ≥ 5s",
      ],
    },
    {
      name: "LASTCALL_MIN_DRAIN from the environment",
      text: deployment({
        containers: [lastcall([], { env: [{ name: "LASTCALL_MIN_DRAIN", value: "1s" }] }), app(5)],
      }),
      findings: [
        "deployment/web: lastcall stops taking requests as early as 1s after termination starts (LASTCALL_MIN_DRAIN 1s), before endpoint removal is over (~3s): clients still routed to the pod are refused; set LASTCALL_MIN_DRAIN ≥ 5s",
      ],
    },
    {
      name: "Istio's MINIMUM_DRAIN_DURATION, which lastcall honours",
      text: deployment({
        containers: [
          lastcall([], { env: [{ name: "MINIMUM_DRAIN_DURATION", value: "1s" }] }),
          app(5),
        ],
      }),
      findings: [
        "deployment/web: lastcall stops taking requests as early as 1s after termination starts (MINIMUM_DRAIN_DURATION 1s), before endpoint removal is over (~3s): clients still routed to the pod are refused; set MINIMUM_DRAIN_DURATION ≥ 5s",
      ],
    },
    {
      name: "--min-drain longer than the app's preStop",
      text: deployment({
        containers: [lastcall(["--drain-time", "10s", "--min-drain", "8s"]), app(5)],
      }),
      findings: [
        'deployment/web: container "app" preStop sleep 5s ends while lastcall still takes new requests until --min-drain 8s: the app stops answering requests the proxy forwards; set lifecycle.preStop.sleep.seconds: 8 on container "app", or set --drain-time ≤ 5s',
      ],
    },
    {
      name: "sleep mode shorter than the app's shutdown",
      text: deployment({
        containers: [lastcall(["--drain-mode", "sleep", "--termination-drain", "8s"]), app(5)],
      }),
      findings: [
        "deployment/web: lastcall --termination-drain 8s is shorter than the app's shutdown (preStop sleep 5s): the proxy stops while the app still calls out; set --termination-drain ≥ 10s or inject lastcall with --mode native (stops after the app)",
      ],
    },
    {
      name: "a value that is not a duration",
      text: deployment({ containers: [lastcall(["--grace", "abc"]), app(5)] }),
      findings: [
        'deployment/web: lastcall: cannot read its timings: --grace "abc" is not a duration',
      ],
    },
    {
      name: "a duration longer than lastcall can time",
      text: deployment({ containers: [lastcall(["--grace", "2592000s"]), app(5)] }),
      findings: [
        'deployment/web: lastcall: cannot read its timings: --grace "2592000s" is longer than lastcall can time (2147483647ms, about 24.8 days)',
      ],
    },
  ])("$name", ({ text, findings }) => {
    expect(lines(text)).toEqual(findings);
  });
});

describe("check accepts what inject produces", () => {
  it.each(["native", "classic"] as const)(
    "%s, for every kind, when the app's preStop outlasts endpoint removal",
    (mode) => {
      const spec = {
        containers: [app(5, { command: ["./server"], ports: [{ containerPort: 8080 }] })],
      };
      const text = injectManifest(manifest(...KINDS.map((kind) => workload(kind, spec))), {
        ...SIDECAR_DEFAULTS,
        mode,
      }).text;
      expect(lines(text)).toEqual([]);
    },
  );

  it.each(["native", "classic"] as const)(
    "%s, for an app without preStop: inject gives it lastcall's GET /v1/app-stop, which holds its SIGTERM until the drain's floor",
    (mode) => {
      const text = injectManifest(
        deployment({ containers: [app(undefined, { ports: [{ containerPort: 8080 }] })] }),
        { ...SIDECAR_DEFAULTS, mode },
      ).text;
      expect(lines(text)).toEqual([]);
    },
  );

  it("and flags the injected pod once the app's preStop is taken away: it gets SIGTERM while the proxy still forwards", () => {
    const text = injectManifest(
      deployment({ containers: [app(undefined, { ports: [{ containerPort: 8080 }] })] }),
      SIDECAR_DEFAULTS,
    ).text;
    const [object, ...rest] = YAML.parseAllDocuments(text).map((d) => d.toJS());
    delete object.spec.template.spec.containers[0].lifecycle;
    expect(lines([object, ...rest].map((o) => YAML.stringify(o)).join("---\n"))).toEqual([
      'deployment/web: container "app" has no preStop: it gets SIGTERM at once while lastcall still takes new requests until --min-drain 5s (default): the app stops answering requests the proxy forwards; add lifecycle.preStop.sleep.seconds: 5 on container "app"',
    ]);
  });
});
