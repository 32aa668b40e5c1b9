// The timing rules of `lastcall check` for one pod template: endpoint removal, the apps' preStop
// hooks, each proxy's drain and the grace period, as findings with a fix each.
import { APP_STOP_NO_DRAIN_MS } from "../drain/app-stop.ts";
import { containerName, podContainers, type PreStop, preStopOf } from "./containers.ts";
import { findProxies } from "./proxies.ts";
import { earlier, formatFlagDuration, type ProxyTiming, type Setting } from "./timing.ts";
import type { PodTemplate } from "./workloads.ts";
import { graceSeconds } from "./sidecar.ts";

/**
 * How long endpoint controllers, kube-proxy and ingress controllers take to stop sending new
 * requests to a terminating pod. It is not in the manifest: usually 1–3 s on a healthy
 * cluster, more behind cloud load balancers (their health-check interval × threshold).
 */
export const ENDPOINT_REMOVAL_MS = 3000;
/**
 * How long an app is assumed to need after its preStop hook to finish what it is serving.
 * Also not in the manifest; the checks take it as a lower bound.
 */
export const APP_SHUTDOWN_MS = 5000;
/** What the fixes ask for where the chain needs "after endpoint removal": 2 s past it. */
const PAST_REMOVAL_MS = ENDPOINT_REMOVAL_MS + 2000;

/** An app container and how long its preStop holds off its SIGTERM. */
interface App {
  name: string;
  preStop: PreStop;
  /** The preStop's length (0 without one); undefined when not known. */
  preStopMs?: number;
}

const f = formatFlagDuration;
const seconds = (ms: number) => Math.ceil(ms / 1000);
const describe = (s: Setting) => `${s.what}${s.isDefault ? " (default)" : ""}`;
/** The fix that moves a setting to `ms`: `set --min-drain ≥ 5s`. */
const set = (s: Setting, relation: "≥" | "≤", ms: number) =>
  `set ${s.knob} ${relation} ${s.format(ms - s.offsetMs)}`;

/** What every rule needs to know about one pod. */
interface Pod {
  graceMs: number;
  /** `terminationGracePeriodSeconds 30`. */
  grace: string;
  apps: App[];
  /** Runs to completion (a Job): behind no Service, so no requests to keep taking. */
  batch: boolean;
}

/** The findings for one pod template, as message lines without the object's name. */
export function checkPod(template: PodTemplate, proxies?: ProxyTiming[]): string[] {
  const spec = template.spec;
  if (!spec) return [];
  const graceMs = graceSeconds(spec) * 1000;
  proxies ??= findProxies(
    spec,
    { ...template.labels, ...template.annotations },
    !template.runsToCompletion,
  );
  const members = new Set(proxies.flatMap((p) => p.members));
  const apps: App[] = podContainers(spec)
    .filter((e) => !e.init && !members.has(containerName(e.container)))
    .map(({ container }) => {
      const preStop = preStopOf(container);
      const preStopMs = preStop.kind === "sleep"
        ? preStop.ms
        : preStop.kind === "none"
        ? 0
        : preStop.kind === "app-stop"
        ? appStopMs(preStop.port, proxies)
        : undefined;
      return { name: containerName(container), preStop, preStopMs };
    });
  const pod: Pod = {
    graceMs,
    grace: `terminationGracePeriodSeconds ${graceMs / 1000}`,
    apps,
    batch: template.runsToCompletion,
  };
  return [
    ...proxies.flatMap((
      p,
    ) => [
      ...p.problems,
      ...takesRequests(p, pod),
      ...outlivesApp(p, pod),
      ...fitsGrace(p, pod),
      ...nativeFitsGrace(p, pod),
    ]),
    ...apps.flatMap((app) => appFitsGrace(app, pod)),
  ];
}

/**
 * How long lastcall's `GET /v1/app-stop` holds the app: until the drain's floor at the least (it
 * also waits for the inbound quiet, and where nothing is left for Envoy, for its last bytes and
 * its stop), or 1 s when the sidecar starts no drain of its own at the pod's end;
 * 0 when no lastcall of the pod serves that port (the kubelet's GET fails at once).
 */
function appStopMs(port: unknown, proxies: ProxyTiming[]): number | undefined {
  const p = proxies.find((p) => p.tool === "lastcall" && p.statusPort === port);
  if (!p) return typeof port === "number" ? 0 : undefined;
  return p.earliestStop?.ms ?? APP_STOP_NO_DRAIN_MS;
}

/** How a finding says when an app's preStop lets its SIGTERM come. */
function hookEnds(app: App): string {
  const name = `container "${app.name}"`;
  if (app.preStop.kind === "none") return `${name} has no preStop: it gets SIGTERM at once`;
  if (app.preStop.kind === "app-stop") {
    return app.preStopMs === 0
      ? `${name} preStop GET /v1/app-stop reaches no lastcall status server (port ${
        String(app.preStop.port)
      }): it gets SIGTERM at once`
      : `${name} preStop GET /v1/app-stop ends after ${f(app.preStopMs ?? 0)} (no drain begins)`;
  }
  return `${name} preStop sleep ${f(app.preStopMs ?? 0)} ends`;
}

/** endpoint removal < proxy's min drain ≤ app's preStop. */
function takesRequests(p: ProxyTiming, pod: Pod): string[] {
  // It takes new requests until its listeners close or it stops, whichever comes first.
  if (pod.batch) return [];
  const accept = p.earliestStop && p.listen ? earlier(p.earliestStop, p.listen) : p.earliestStop;
  if (!accept) return p.native ? untilAppExits(p, pod) : [];
  const out: string[] = [];
  if (accept.ms <= ENDPOINT_REMOVAL_MS) {
    out.push(
      `${p.container} stops taking requests as early as ${
        f(accept.ms)
      } after termination starts (${accept.what}${
        accept.isDefault ? ", default" : ""
      }), before endpoint removal is over (~${
        f(ENDPOINT_REMOVAL_MS)
      }): clients still routed to the pod are refused; ${set(accept, "≥", PAST_REMOVAL_MS)}`,
    );
  }
  for (const app of pod.apps) {
    if (app.preStopMs === undefined || app.preStopMs >= accept.ms) continue;
    let fix = `${app.preStop.kind === "none" ? "add" : "set"} lifecycle.preStop.sleep.seconds: ${
      seconds(accept.ms)
    } on container "${app.name}"`;
    // Closing the proxy's listeners sooner also works, as long as it is still after endpoint removal.
    if (p.listen && app.preStopMs > ENDPOINT_REMOVAL_MS) {
      fix += `, or ${set(p.listen, "≤", app.preStopMs)}`;
    }
    const hook = hookEnds(app);
    out.push(
      `${hook} while ${p.container} still takes new requests until ${
        describe(accept)
      }: the app stops answering requests the proxy forwards; ${fix}`,
    );
  }
  return out;
}

/**
 * A native sidecar that takes requests until the app has exited (its SIGTERM comes then): the
 * app gets its own SIGTERM as the pod starts terminating, and must keep answering what is
 * routed to the pod until endpoint removal is over.
 */
function untilAppExits(p: ProxyTiming, pod: Pod): string[] {
  return pod.apps.flatMap((app) => {
    if (app.preStopMs === undefined || app.preStopMs > ENDPOINT_REMOVAL_MS) return [];
    const hook = hookEnds(app);
    return [
      `${hook}, before endpoint removal is over (~${
        f(ENDPOINT_REMOVAL_MS)
      }), while ${p.container} (a native sidecar) still takes new requests until the app has exited: the app stops answering requests the proxy forwards; ${
        app.preStop.kind === "none" ? "add" : "set"
      } lifecycle.preStop.sleep.seconds: ${seconds(PAST_REMOVAL_MS)} on container "${app.name}"`,
    ];
  });
}

/** app's shutdown < proxy's drain deadline (a proxy that stops at a fixed time, or once idle). */
function outlivesApp(p: ProxyTiming, pod: Pod): string[] {
  const stop = p.stop ?? p.idleStop;
  if (!stop) return [];
  return pod.apps.flatMap((app) => {
    if (app.preStopMs === undefined) return [];
    const needMs = app.preStopMs + APP_SHUTDOWN_MS;
    if (stop.ms >= needMs) return [];
    // The knob's new value must fit in the grace period too.
    const knobMs = needMs - stop.offsetMs;
    const andGrace = knobMs > pod.graceMs
      ? ` and terminationGracePeriodSeconds ≥ ${seconds(knobMs)}`
      : "";
    if (p.stop) {
      return [
        `${p.container} ${describe(stop)} is shorter than ${
          shutdownOf(app, pod)
        }: the proxy stops while the app still calls out; ${set(stop, "≥", needMs)}${andGrace} ${
          alternative(p)
        }`,
      ];
    }
    return [
      `${p.container} may exit as early as ${
        f(stop.ms)
      } after termination starts, at the first poll that finds no connection open (${
        describe(stop)
      }), before ${
        shutdownOf(app, pod)
      } is over: an app idle for a moment loses its proxy, and its calls out fail from then on; ${
        set(stop, "≥", needMs)
      }${andGrace} ${alternative(p)}`,
    ];
  });
}

/** proxy's drain deadline ≤ grace period. */
function fitsGrace(p: ProxyTiming, pod: Pod): string[] {
  const deadline = p.deadline ?? p.stop;
  if (!deadline || deadline.ms <= pod.graceMs) return [];
  const raise = `terminationGracePeriodSeconds ≥ ${seconds(deadline.ms)}`;
  // When the parts before the knob already pass the deadline, only the grace period helps.
  const fix = pod.graceMs > deadline.offsetMs
    ? `${set(deadline, "≤", pod.graceMs)} or ${raise}`
    : `set ${raise}`;
  return [
    `${p.container} ${
      describe(deadline)
    } is longer than ${pod.grace}: the kubelet kills the proxy first; ${fix}`,
  ];
}

/** A native sidecar drains after the app: app's shutdown + its drain ≤ grace period. */
function nativeFitsGrace(p: ProxyTiming, pod: Pod): string[] {
  const after = p.afterApp;
  if (!after) return [];
  return pod.apps.flatMap((app) => {
    if (app.preStopMs === undefined) return [];
    const needMs = app.preStopMs + APP_SHUTDOWN_MS + after.ms;
    if (needMs <= pod.graceMs) return [];
    return [
      `${p.container} is a native sidecar: its ${describe(after)} starts after ${
        shutdownOf(app, pod)
      } and ends past ${pod.grace}: the kubelet kills it mid-drain; set terminationGracePeriodSeconds ≥ ${
        seconds(needMs)
      }`,
    ];
  });
}

/** app's preStop + its shutdown ≤ grace period, proxy or not. */
function appFitsGrace(app: App, pod: Pod): string[] {
  if (app.preStop.kind !== "sleep" || app.preStop.ms + APP_SHUTDOWN_MS <= pod.graceMs) return [];
  return [
    `container "${app.name}" preStop sleep ${f(app.preStop.ms)} leaves less than ${
      f(APP_SHUTDOWN_MS)
    } of ${pod.grace} for its shutdown: the kubelet kills it mid-shutdown; set terminationGracePeriodSeconds ≥ ${
      seconds(app.preStop.ms + APP_SHUTDOWN_MS)
    }`,
  ];
}

/** `the app's shutdown (preStop sleep 30s)`, or the container's name when there are several. */
function shutdownOf(app: App, pod: Pod): string {
  return `${pod.apps.length === 1 ? "the app's" : `container "${app.name}"'s`} shutdown (${
    hookText(app.preStop)
  })`;
}

/** How a finding names an app's preStop. */
function hookText(preStop: PreStop): string {
  if (preStop.kind === "none") return "no preStop";
  if (preStop.kind === "sleep") return `preStop sleep ${f(preStop.ms)}`;
  if (preStop.kind === "app-stop") return "preStop GET /v1/app-stop";
  return `preStop ${preStop.what}`;
}

/** The other way out of a proxy-stops-first finding. */
function alternative(p: ProxyTiming): string {
  if (p.tool === "lastcall") return "or inject lastcall with --mode native (stops after the app)";
  if (p.tool === "istio") {
    return `or run istio-proxy as a native sidecar (sidecar.istio.io/nativeSidecar: "true"; stops after the app) or use lastcall (waits for the app)`;
  }
  return "or use lastcall (waits for the app)";
}
