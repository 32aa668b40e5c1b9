// Recognises the proxies of a pod (lastcall, Istio's pilot-agent, Contour's shutdown-manager
// pair) and reads their termination timings, each with its tool's defaults. The rules that
// compare them live in check.ts.
import { containerName, podContainers } from "./containers.ts";
import { contourProxy } from "./proxy-contour.ts";
import { istioProxy } from "./proxy-istio.ts";
import { lastcallProxy } from "./proxy-lastcall.ts";
import type { ProxyTiming } from "./timing.ts";

/**
 * Every proxy found in a pod spec with its template annotations; `servesRequests` is false for
 * pods that run to completion (Jobs), which are behind no Service.
 */
export function findProxies(spec: Record<string, unknown>, annotations: Record<string, unknown>, servesRequests = true): ProxyTiming[] {
  const found: ProxyTiming[] = [];
  const add = (read: () => ProxyTiming | undefined, container: string, tool: ProxyTiming["tool"]) => {
    try {
      const proxy = read();
      if (proxy) found.push(proxy);
    } catch (error) {
      found.push({ container, members: [container], tool, native: false, problems: [`${container}: cannot read its timings: ${(error as Error).message}`] });
    }
  };
  for (const { container, init } of podContainers(spec)) {
    add(() => lastcallProxy(container, init, servesRequests), containerName(container), "lastcall");
  }
  add(() => istioProxy(spec, annotations), "istio-proxy", "istio");
  add(() => contourProxy(spec), "shutdown-manager", "contour");
  return found;
}

