// The proxies a pod may already have (a mesh's sidecar, an Envoy of its own) and the marks that
// make a mesh add one; `inject` refuses such pods.
import { argv, containerName, isProgram, podContainers } from "./containers.ts";

/** A proxy found in a pod, or a mark that will add one. */
export interface OtherProxy {
  /** `Istio's sidecar (container "istio-proxy")`, `Linkerd's injection (annotation linkerd.io/inject: enabled)`. */
  what: string;
  /** What to do instead, one clause. */
  migrate: string;
}

const ISTIO =
  "remove Istio's injection first (label the namespace or pod sidecar.istio.io/inject=false, apply the manifest without istio-proxy) then inject; lastcall honours Istio's drain variables (docs/migration.md)";
const MESH = (name: string, how: string) => `remove ${name}'s injection first (${how}) then inject`;

/** Sidecars by container name: [name, product, migration]. */
const SIDECARS: readonly (readonly [string, string, string])[] = [
  ["istio-proxy", "Istio's sidecar", ISTIO],
  ["linkerd-proxy", "Linkerd's sidecar", MESH("Linkerd", "annotation linkerd.io/inject: disabled")],
  [
    "consul-dataplane",
    "Consul's sidecar",
    MESH("Consul", `annotation consul.hashicorp.com/connect-inject: "false"`),
  ],
  [
    "envoy-sidecar",
    "Consul's sidecar",
    MESH("Consul", `annotation consul.hashicorp.com/connect-inject: "false"`),
  ],
  [
    "consul-connect-envoy-sidecar",
    "Consul's sidecar",
    MESH("Consul", `annotation consul.hashicorp.com/connect-inject: "false"`),
  ],
  [
    "kuma-sidecar",
    "Kuma's sidecar",
    MESH("Kuma", "annotation or label kuma.io/sidecar-injection: disabled"),
  ],
];

/**
 * The mesh whose sidecar a container name is (`Linkerd's sidecar`), or undefined. `check`
 * names the sidecars it does not model with it.
 *
 * @example
 * ```ts
 * meshSidecar("kuma-sidecar"); // "Kuma's sidecar"
 * meshSidecar("app"); // undefined
 * ```
 */
export function meshSidecar(name: string): string | undefined {
  return SIDECARS.find(([n]) => n === name)?.[1];
}

/** Annotations (or labels) that make a mesh inject its sidecar at admission: [key, values, product, migration]. */
const MARKS: readonly (readonly [string, RegExp, string, string])[] = [
  ["sidecar.istio.io/inject", /^true$/i, "Istio's injection", ISTIO],
  [
    "linkerd.io/inject",
    /^enabled$/i,
    "Linkerd's injection",
    MESH("Linkerd", "annotation linkerd.io/inject: disabled"),
  ],
  [
    "consul.hashicorp.com/connect-inject",
    /^true$/i,
    "Consul's injection",
    MESH("Consul", `annotation consul.hashicorp.com/connect-inject: "false"`),
  ],
  [
    "kuma.io/sidecar-injection",
    /^enabled$/i,
    "Kuma's injection",
    MESH("Kuma", "annotation or label kuma.io/sidecar-injection: disabled"),
  ],
];

/**
 * Every proxy of a pod spec that is not lastcall's, and every mesh mark on its template
 * (`marks`: annotations and labels together).
 *
 * @example
 * ```ts
 * otherProxies({ containers: [{ name: "istio-proxy", image: "istio/proxyv2" }] }, {})[0].what;
 * // `Istio's sidecar (container "istio-proxy")`
 * ```
 */
export function otherProxies(
  spec: Record<string, unknown>,
  marks: Record<string, unknown>,
): OtherProxy[] {
  const found: OtherProxy[] = [];
  for (const { container } of podContainers(spec)) {
    const name = containerName(container);
    const sidecar = SIDECARS.find(([n]) => n === name);
    if (sidecar) {
      found.push({ what: `${sidecar[1]} (container "${name}")`, migrate: sidecar[2] });
      continue;
    }
    const envoy = envoyOf(container);
    // A plain Envoy goes last: its pod's shutdown-manager, when it has one, says more.
    if (envoy) found.push({ what: `${envoy.what} (container "${name}")`, migrate: envoy.migrate });
  }
  found.sort((a, b) =>
    Number(a.what.startsWith("an Envoy")) - Number(b.what.startsWith("an Envoy"))
  );
  for (const [key, value, product, migrate] of MARKS) {
    const set = marks[key];
    if (typeof set === "string" && value.test(set)) {
      found.push({ what: `${product} (${key}: ${set})`, migrate });
    }
  }
  return found;
}

const CONTOUR =
  "this pod is Contour's Envoy: keep it, and put lastcall in its shutdown-manager container (docs/migration.md, Contour)";
const GATEWAY =
  "this pod is Envoy Gateway's Envoy: keep it, and put lastcall in its shutdown-manager container (docs/migration.md, Envoy Gateway)";

/** Names the Envoy (or its shutdown-manager) a container runs other than under lastcall, or undefined. */
function envoyOf(container: Record<string, unknown>): OtherProxy | undefined {
  const words = argv(container);
  const image = typeof container.image === "string" ? container.image : "";
  if (isProgram(words[0], "envoy-gateway") || /(^|\/)envoyproxy\/gateway[:@]/.test(image)) {
    return { what: "Envoy Gateway's shutdown-manager", migrate: GATEWAY };
  }
  if (isProgram(words[0], "contour") && words.includes("shutdown-manager")) {
    return { what: "Contour's shutdown-manager", migrate: CONTOUR };
  }
  if (isProgram(words[0], "lastcall")) return undefined;
  if (isProgram(words[0], "envoy") || /(^|\/)envoyproxy\/envoy[^/]*([:@]|$)/.test(image)) {
    return {
      what: "an Envoy",
      migrate:
        "this pod runs its own Envoy: run that Envoy under `lastcall run` (docs/kubernetes.md) instead of adding a second one",
    };
  }
  return undefined;
}
