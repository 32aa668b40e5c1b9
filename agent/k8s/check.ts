// `lastcall check`: the termination timing chain of each pod template. A pod stops cleanly
// when, counted from the moment it starts terminating,
//
//   endpoint removal < proxy's min drain ≤ app's preStop < app's shutdown < proxy's drain deadline ≤ grace period
//
// (after the Istio/Envoy analysis in docs/kubernetes.md): the proxy must take requests until
// no endpoint sends any, the app must keep answering what the proxy still forwards, and the
// proxy must outlive the app's last request within the kubelet's deadline.
import { containerName, podContainers, type PreStop, preStopOf } from "./containers.ts";
import { readManifest } from "./manifest.ts";
import { findProxies } from "./proxies.ts";
import { earlier, formatFlagDuration, type ProxyTiming, type Setting } from "./timing.ts";
import { findPodTemplate, type PodTemplate } from "./workloads.ts";
import { DEFAULT_GRACE_SECONDS } from "./sidecar.ts";

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

/** One problem in a pod's termination timing. */
export interface Finding {
  /** The workload: `deployment/web`. */
  ref: string;
  /** What is wrong, with the fields, their values and a fix. */
  message: string;
}

/**
 * Checks the termination timing chain of every pod template in a manifest.
 *
 * @example
 * ```ts
 * for (const f of checkManifest(text)) console.log(`${f.ref}: ${f.message}`);
 * ```
 * @throws {ManifestError} when the manifest is not YAML
 */
export function checkManifest(text: string): Finding[] {
  const findings: Finding[] = [];
  for (const { doc } of readManifest(text)) {
    const template = findPodTemplate(doc.toJS());
    if (template) findings.push(...checkPod(template).map((message) => ({ ref: template.ref, message })));
  }
  return findings;
}

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
const set = (s: Setting, relation: "≥" | "≤", ms: number) => `set ${s.knob} ${relation} ${s.format(ms - s.offsetMs)}`;

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
export function checkPod(template: PodTemplate): string[] {
  const spec = template.spec;
  if (!spec) return [];
  const graceMs = (typeof spec.terminationGracePeriodSeconds === "number" ? spec.terminationGracePeriodSeconds : DEFAULT_GRACE_SECONDS) * 1000;
  const proxies = findProxies(spec, template.annotations, !template.runsToCompletion);
  const members = new Set(proxies.flatMap((p) => p.members));
  const apps: App[] = podContainers(spec)
    .filter((e) => !e.init && !members.has(containerName(e.container)))
    .map(({ container }) => {
      const preStop = preStopOf(container);
      return { name: containerName(container), preStop, preStopMs: preStop.kind === "sleep" ? preStop.ms : preStop.kind === "none" ? 0 : undefined };
    });
  const pod: Pod = { graceMs, grace: `terminationGracePeriodSeconds ${graceMs / 1000}`, apps, batch: template.runsToCompletion };
  return [
    ...proxies.flatMap((p) => [...p.problems, ...takesRequests(p, pod), ...outlivesApp(p, pod), ...fitsGrace(p, pod), ...nativeFitsGrace(p, pod)]),
    ...apps.flatMap((app) => appFitsGrace(app, pod)),
  ];
}

/** endpoint removal < proxy's min drain ≤ app's preStop. */
function takesRequests(p: ProxyTiming, pod: Pod): string[] {
  // It takes new requests until its listeners close or it stops, whichever comes first.
  const accept = pod.batch ? undefined : p.earliestStop && p.listen ? earlier(p.earliestStop, p.listen) : p.earliestStop;
  if (!accept) return [];
  const out: string[] = [];
  if (accept.ms <= ENDPOINT_REMOVAL_MS) {
    out.push(`${p.container} stops taking requests as early as ${f(accept.ms)} after termination starts (${accept.what}${accept.isDefault ? ", default" : ""}), before endpoint removal is over (~${f(ENDPOINT_REMOVAL_MS)}): clients still routed to the pod are refused; ${set(accept, "≥", ENDPOINT_REMOVAL_MS + 2000)}`);
  }
  for (const app of pod.apps) {
    if (app.preStopMs === undefined || app.preStopMs >= accept.ms) continue;
    let fix = `${app.preStop.kind === "none" ? "add" : "set"} lifecycle.preStop.sleep.seconds: ${seconds(accept.ms)} on container "${app.name}"`;
    // Closing the proxy's listeners sooner also works, as long as it is still after endpoint removal.
    if (p.listen && app.preStopMs > ENDPOINT_REMOVAL_MS) fix += `, or ${set(p.listen, "≤", app.preStopMs)}`;
    const hook = app.preStop.kind === "none" ? `container "${app.name}" has no preStop: it gets SIGTERM at once` : `container "${app.name}" preStop sleep ${f(app.preStopMs)} ends`;
    out.push(`${hook} while ${p.container} still takes new requests until ${describe(accept)}: the app stops answering requests the proxy forwards; ${fix}`);
  }
  return out;
}

/** app's shutdown < proxy's drain deadline (a proxy that stops at a fixed time). */
function outlivesApp(p: ProxyTiming, pod: Pod): string[] {
  const stop = p.stop;
  if (!stop) return [];
  return pod.apps.flatMap((app) => {
    if (app.preStopMs === undefined) return [];
    const needMs = app.preStopMs + APP_SHUTDOWN_MS;
    if (stop.ms >= needMs) return [];
    // The knob's new value must fit in the grace period too.
    const knobMs = needMs - stop.offsetMs;
    const andGrace = knobMs > pod.graceMs ? ` and terminationGracePeriodSeconds ≥ ${seconds(knobMs)}` : "";
    return [`${p.container} ${describe(stop)} is shorter than ${shutdownOf(app, pod)}: the proxy stops while the app still calls out; ${set(stop, "≥", needMs)}${andGrace} ${alternative(p)}`];
  });
}

/** proxy's drain deadline ≤ grace period. */
function fitsGrace(p: ProxyTiming, pod: Pod): string[] {
  const deadline = p.deadline ?? p.stop;
  if (!deadline || deadline.ms <= pod.graceMs) return [];
  const raise = `terminationGracePeriodSeconds ≥ ${seconds(deadline.ms)}`;
  // When the parts before the knob already pass the deadline, only the grace period helps.
  const fix = pod.graceMs > deadline.offsetMs ? `${set(deadline, "≤", pod.graceMs)} or ${raise}` : `set ${raise}`;
  return [`${p.container} ${describe(deadline)} is longer than ${pod.grace}: the kubelet kills the proxy first; ${fix}`];
}

/** A native sidecar drains after the app: app's shutdown + its drain ≤ grace period. */
function nativeFitsGrace(p: ProxyTiming, pod: Pod): string[] {
  const after = p.afterApp;
  if (!after) return [];
  return pod.apps.flatMap((app) => {
    if (app.preStopMs === undefined) return [];
    const needMs = app.preStopMs + APP_SHUTDOWN_MS + after.ms;
    if (needMs <= pod.graceMs) return [];
    return [`${p.container} is a native sidecar: its ${describe(after)} starts after ${shutdownOf(app, pod)} and ends past ${pod.grace}: the kubelet kills it mid-drain; set terminationGracePeriodSeconds ≥ ${seconds(needMs)}`];
  });
}

/** app's preStop + its shutdown ≤ grace period, proxy or not. */
function appFitsGrace(app: App, pod: Pod): string[] {
  if (app.preStop.kind !== "sleep" || app.preStop.ms + APP_SHUTDOWN_MS <= pod.graceMs) return [];
  return [`container "${app.name}" preStop sleep ${f(app.preStop.ms)} leaves less than ${f(APP_SHUTDOWN_MS)} of ${pod.grace} for its shutdown: the kubelet kills it mid-shutdown; set terminationGracePeriodSeconds ≥ ${seconds(app.preStop.ms + APP_SHUTDOWN_MS)}`];
}

/** `the app's shutdown (preStop sleep 30s)`, or the container's name when there are several. */
function shutdownOf(app: App, pod: Pod): string {
  return `${pod.apps.length === 1 ? "the app's" : `container "${app.name}"'s`} shutdown (${hookText(app.preStop)})`;
}

/** How a finding names an app's preStop. */
function hookText(preStop: PreStop): string {
  if (preStop.kind === "none") return "no preStop";
  if (preStop.kind === "sleep") return `preStop sleep ${f(preStop.ms)}`;
  return `preStop ${preStop.what}`;
}

/** The other way out of a proxy-stops-first finding. */
function alternative(p: ProxyTiming): string {
  return p.tool === "lastcall" ? "or inject lastcall with --mode native (stops after the app)" : "or use lastcall (waits for the app)";
}
