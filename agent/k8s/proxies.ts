// Recognises the proxies of a pod (lastcall, Istio, Contour, Envoy Gateway) and reads their
// termination timings; others are found, not modelled.
import { argv, containerName, type ContainerSpec, isProgram, podContainers } from "./containers.ts";
import { meshSidecar } from "./other-proxies.ts";
import { contourProxy } from "./proxy-contour.ts";
import { gatewayProxy } from "./proxy-gateway.ts";
import { istioProxy } from "./proxy-istio.ts";
import { lastcallProxy } from "./proxy-lastcall.ts";
import type { ProxyTiming } from "./timing.ts";

/**
 * Every proxy found in a pod spec with its template annotations and labels (Istio reads
 * `sidecar.istio.io/inject` from either); `servesRequests` is false for
 * pods that run to completion (Jobs), which are behind no Service.
 *
 * @example
 * ```ts
 * findProxies({ containers: [{ name: "app" }, { name: "linkerd-proxy" }] }, {})[0].unmodelled;
 * // "Linkerd's sidecar"
 * ```
 */
export function findProxies(
  spec: Record<string, unknown>,
  annotations: Record<string, unknown>,
  servesRequests = true,
): ProxyTiming[] {
  const found: ProxyTiming[] = [];
  const add = (
    read: () => ProxyTiming | undefined,
    container: string,
    tool: ProxyTiming["tool"],
  ) => {
    try {
      const proxy = read();
      if (proxy) found.push(proxy);
    } catch (error) {
      found.push({
        container,
        members: [container],
        tool,
        native: false,
        problems: [`${container}: cannot read its timings: ${(error as Error).message}`],
      });
    }
  };
  for (const { container, init } of podContainers(spec)) {
    add(() => lastcallProxy(container, init, servesRequests), containerName(container), "lastcall");
  }
  add(() => istioProxy(spec, annotations, servesRequests), "istio-proxy", "istio");
  add(() => contourProxy(spec), "shutdown-manager", "contour");
  add(() => gatewayProxy(spec), "shutdown-manager", "envoy-gateway");
  // The mesh sidecars inject refuses (other-proxies.ts); istio-proxy, modelled above, is a member by now.
  const members = new Set(found.flatMap((p) => p.members));
  for (const { container } of podContainers(spec)) {
    const name = containerName(container);
    const what = meshSidecar(name) ??
      (isBareEnvoy(container) ? "an Envoy without a shutdown manager" : undefined);
    if (what && !members.has(name)) {
      found.push({
        container: name,
        members: [name],
        tool: "other",
        native: false,
        problems: [],
        unmodelled: what,
      });
    }
  }
  return found;
}

/** A container that runs Envoy itself (its command, or an envoyproxy/envoy image without one). */
function isBareEnvoy(c: ContainerSpec): boolean {
  const words = argv(c);
  if (words.length) return isProgram(words[0], "envoy");
  return typeof c.image === "string" && /(^|\/)envoyproxy\/envoy[^/]*([:@]|$)/.test(c.image);
}
