// Which pods inject leaves as they are, and the one line that says why: another proxy, the
// node's network, too short a grace period, a name lastcall's volume needs; a pod that already
// has lastcall or opts out is left without a word.
import { otherProxies } from "./other-proxies.ts";
import { lastcallArgs } from "./proxy-lastcall.ts";
import { podContainers } from "./containers.ts";
import {
  CONFIG_VOLUME,
  graceSeconds,
  MIN_GRACE_SECONDS,
  SIDECAR_NAME,
  STATUS_PORT,
} from "./sidecar.ts";
import { getPath, isRecord, type PodTemplate } from "./workloads.ts";

/**
 * The annotation that keeps a workload out of `inject`: `lastcall/inject: "false"` on the pod
 * template or on the workload itself.
 */
export const OPT_OUT_ANNOTATION = "lastcall/inject";

/**
 * Why a pod is left as it is, or undefined when it can take the sidecar; `hostNetwork`: whether
 * `--host-network` lets a pod on the node's network take it.
 *
 * @example
 * ```ts
 * refusalOf(findPodTemplate(pod)!, false); // "uses hostNetwork: … left as is (--host-network …)"
 * ```
 */
export function refusalOf(template: PodTemplate, hostNetwork: boolean): string | undefined {
  const spec = template.spec!;
  const others = otherProxies(spec, { ...template.labels, ...template.annotations });
  if (others.length > 0) {
    return `already has ${
      others.map((o) => o.what).join(" and ")
    }: a second proxy would take the same ports and drain on its own; left as is. To move to lastcall: ${
      others[0].migrate
    }`;
  }
  if (spec.hostNetwork === true && !hostNetwork) {
    return `uses hostNetwork: its sidecar would take the node's ports (${STATUS_PORT}, Envoy's admin and listeners) on every node it runs on; left as is (--host-network to inject it anyway)`;
  }
  const grace = graceSeconds(spec);
  if (grace < MIN_GRACE_SECONDS) {
    const written = spec.terminationGracePeriodSeconds;
    const read = written === grace ? `${grace}` : `${written} (the API server makes it ${grace})`;
    return `terminationGracePeriodSeconds ${read} leaves lastcall no time to drain (it needs at least ${MIN_GRACE_SECONDS}): left as is`;
  }
  const volumes = Array.isArray(spec.volumes) ? spec.volumes.filter(isRecord) : [];
  if (volumes.some((v) => v.name === CONFIG_VOLUME)) {
    return `has a volume named ${CONFIG_VOLUME}, the name lastcall's Envoy config is mounted under: left as is (rename that volume)`;
  }
  return undefined;
}

/** Whether the workload or its pod template says `lastcall/inject: "false"`. */
export function optedOut(object: unknown, template: PodTemplate): boolean {
  const own = getPath(object, ["metadata", "annotations", OPT_OUT_ANNOTATION]);
  return [own, template.annotations[OPT_OUT_ANNOTATION]].some((v) =>
    v === false || (typeof v === "string" && /^(false|no|off|disabled)$/i.test(v))
  );
}

/**
 * Whether the pod already has lastcall: a container named `lastcall` (injected, or written by
 * hand), or one running `lastcall run` or `lastcall shutdown-manager` (Contour's Envoy pod with
 * lastcall swapped in).
 */
export function hasSidecar(spec: Record<string, unknown>): boolean {
  return podContainers(spec).some(({ container }) =>
    container.name === SIDECAR_NAME ||
    ["run", "shutdown-manager"].includes(lastcallArgs(container)?.[0] ?? "")
  );
}

/**
 * The line for an object of a kind inject does not wire that carries a pod template (a
 * ReplicaSet, Argo's Rollout), or undefined for any other object.
 *
 * @example
 * ```ts
 * unknownKind({ kind: "ReplicaSet", metadata: { name: "web" }, spec: { template: { spec: { containers: [] } } } });
 * // "replicaset/web: ReplicaSet is not a kind inject wires: left as is"
 * ```
 */
export function unknownKind(object: Record<string, unknown>): string | undefined {
  if (!Array.isArray(getPath(object, ["spec", "template", "spec", "containers"]))) return undefined;
  const kind = String(object.kind);
  const name = getPath(object, ["metadata", "name"]);
  return `${kind.toLowerCase()}/${name}: ${kind} is not a kind inject wires: left as is`;
}
