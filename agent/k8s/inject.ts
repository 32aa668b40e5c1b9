// `lastcall inject`: adds the sidecar to every pod template of a manifest. Edits go through
// the YAML syntax tree, so the user's comments and layout survive in the documents it touches,
// and documents it does not touch are printed back byte for byte.
import { type Document, isMap, isScalar, isSeq, type Node, visit, type YAMLMap, type YAMLSeq } from "yaml";
import { type ManifestDocument, readManifest, renderManifest } from "./manifest.ts";
import { ownIn, ownItem, ownValue, valueOf } from "./own-node.ts";
import { findPodTemplate, getPath, isRecord, type PodTemplate } from "./workloads.ts";
import { podContainers } from "./containers.ts";
import { otherProxies } from "./other-proxies.ts";
import { lastcallArgs } from "./proxy-lastcall.ts";
import { withoutLibc } from "./app-images.ts";
import { renderJson } from "./json-out.ts";
import {
  BIN_VOLUME,
  binMount,
  binVolume,
  CONFIG_VOLUME,
  configVolume,
  DEFAULT_GRACE_SECONDS,
  installContainer,
  isWrapped,
  MIN_GRACE_SECONDS,
  SIDECAR_NAME,
  sidecarContainer,
  STATUS_PORT,
  type SidecarOptions,
  wrapCommand,
} from "./sidecar.ts";

/** Options of {@linkcode injectManifest}: the sidecar's, and what inject may touch. */
export interface InjectOptions extends SidecarOptions {
  /**
   * Inject pods with `hostNetwork: true` too: their sidecar takes the node's ports (the status
   * port, Envoy's admin and listeners), once per node. @default false
   */
  hostNetwork?: boolean;
}

/** What {@linkcode injectManifest} produced. */
export interface InjectResult {
  /** The manifest with the sidecar added, in the input's format (YAML, or JSON for JSON). */
  text: string;
  /** One line per thing the user should know (containers not wrapped, pods left alone). */
  warnings: string[];
  /** How many pod templates got the sidecar. */
  injected: number;
  /** How many pod templates were left as they are for a reason a warning gives (not opt-outs). */
  refused: number;
}

/**
 * The annotation that keeps a workload out of `inject`: `lastcall/inject: "false"` on the pod
 * template or on the workload itself.
 */
export const OPT_OUT_ANNOTATION = "lastcall/inject";

/**
 * Adds the lastcall sidecar to each Pod, Deployment, StatefulSet, DaemonSet, Job and CronJob
 * of a manifest, and to those inside a `kind: List` (what `kubectl get -o yaml` prints); other
 * documents, and pods that already have a `lastcall` container, are printed back unchanged, so
 * injecting twice gives the same bytes as injecting once. A pod that has another proxy, uses
 * the host's network or cannot hold lastcall's drain is refused: left as is, with a warning.
 *
 * @example
 * ```ts
 * const { text, warnings } = injectManifest(readFileSync("deploy.yaml", "utf8"), SIDECAR_DEFAULTS);
 * ```
 * @throws {ManifestError} when the manifest is not YAML or JSON, or is an unrendered template
 */
export function injectManifest(text: string, options: InjectOptions): InjectResult {
  const documents = readManifest(text);
  const changed = new Set<ManifestDocument>();
  const warnings: string[] = [];
  let refused = 0;
  let injected = 0;
  for (const d of documents) {
    for (const object of objectsOf(d.doc)) {
      const done = injectObject(d.doc, object, options, (line, refusal) => {
        warnings.push(line);
        if (refusal) refused++;
      });
      if (!done) continue;
      injected++;
      changed.add(d);
    }
  }
  // A file of comments only holds no document: it comes back as it is.
  const out = documents.length === 0 || changed.size === 0 ? text : isJson(text) ? renderJson(documents) : renderManifest(documents, changed);
  return { text: out, warnings, injected, refused };
}

/** Adds the sidecar to the pod template of each object of a document; returns whether it changed. */
export function injectDocument(doc: Document, options: InjectOptions, warn: (line: string) => void): boolean {
  return objectsOf(doc).map((object) => injectObject(doc, object, options, warn)).some(Boolean);
}

/** The objects of a document: the document itself, or the items of a `kind: List`. */
function objectsOf(doc: Document): YAMLMap[] {
  const root = doc.contents;
  if (!isMap(root)) return [];
  const kind = (valueOf(doc, root) as { kind?: unknown }).kind;
  if (typeof kind !== "string" || !/List$/.test(kind)) return [root];
  const items = ownValue(doc, root, "items");
  return isSeq(items) ? items.items.map((_, i) => ownItem(doc, items, i)).filter(isMap) : [];
}

/** Adds the sidecar to one object's pod template; returns whether the object changed. */
function injectObject(doc: Document, object: YAMLMap, options: InjectOptions, warn: (line: string, refusal: boolean) => void): boolean {
  const value = valueOf(doc, object);
  const template = findPodTemplate(value);
  if (!template) return false;
  if (!template.spec || !Array.isArray(template.spec.containers) || template.spec.containers.length === 0) {
    warn(`${template.ref}: no containers at ${template.specPath.join(".")}.containers: left as is`, true);
    return false;
  }
  if (hasSidecar(template.spec) || optedOut(value, template)) return false;
  const refusal = refusalOf(template, options);
  if (refusal) {
    warn(`${template.ref}: ${refusal}`, true);
    return false;
  }
  // Made the document's own along the way: a spec or containers from an anchor are copied here.
  const spec = ownIn(doc, template.specPath, object);
  if (!isMap(spec)) return false;
  const grace = graceSeconds(template.spec);
  const sidecar = { ...options, statusPort: freeStatusPort(template.spec) };
  const container = compact(doc.createNode(sidecarContainer(grace, sidecar), { aliasDuplicateObjects: false }));
  if (sidecar.statusPort !== STATUS_PORT) {
    warn(`${template.ref}: port ${STATUS_PORT} is taken in this pod: lastcall's status server uses ${sidecar.statusPort}`, false);
  }
  if (options.mode === "native") {
    // Last among the init containers: the pod's own init steps run as before, and the app
    // containers start once the proxy's startup probe passes.
    sequence(doc, spec, "initContainers").items.push(container);
  } else {
    sequence(doc, spec, "containers").items.unshift(container);
  }
  addVolume(doc, spec, CONFIG_VOLUME, configVolume(options.configMap));
  if (options.mode === "classic") wrapApps(doc, spec, template, sidecar, (line) => warn(line, false));
  return true;
}

/** Why a pod is left as it is, or undefined when it can take the sidecar. */
function refusalOf(template: PodTemplate, options: InjectOptions): string | undefined {
  const spec = template.spec!;
  const others = otherProxies(spec, { ...template.labels, ...template.annotations });
  if (others.length > 0) {
    return `already has ${others.map((o) => o.what).join(" and ")}: a second proxy would take the same ports and drain on its own; left as is. To move to lastcall: ${others[0].migrate}`;
  }
  if (spec.hostNetwork === true && !options.hostNetwork) {
    return `uses hostNetwork: its sidecar would take the node's ports (${STATUS_PORT}, Envoy's admin and listeners) on every node it runs on; left as is (--host-network to inject it anyway)`;
  }
  const grace = graceSeconds(spec);
  if (grace < MIN_GRACE_SECONDS) {
    return `terminationGracePeriodSeconds ${grace} leaves lastcall no time to drain (it needs at least ${MIN_GRACE_SECONDS}): left as is`;
  }
  return undefined;
}

/** Whether the workload or its pod template says `lastcall/inject: "false"`. */
function optedOut(object: unknown, template: PodTemplate): boolean {
  const own = getPath(object, ["metadata", "annotations", OPT_OUT_ANNOTATION]);
  return [own, template.annotations[OPT_OUT_ANNOTATION]].some((v) => v === false || (typeof v === "string" && /^(false|no|off|disabled)$/i.test(v)));
}

/**
 * The status port for a pod: {@linkcode STATUS_PORT} unless a container of the pod declares it
 * (then the next port no container declares), so probes never reach another process.
 */
function freeStatusPort(spec: Record<string, unknown>): number {
  const taken = new Set(podContainers(spec).flatMap(({ container }) =>
    Array.isArray(container.ports) ? container.ports.filter(isRecord).flatMap((p) => [p.containerPort, p.hostPort]) : []
  ));
  let port = STATUS_PORT;
  while (taken.has(port)) port++;
  return port;
}

/** Whether the input is JSON (its first character opens an object or an array). */
function isJson(text: string): boolean {
  return /^\s*[{[]/.test(text);
}

/** Writes command lines on one line (`args: [run, --config, …]`), as people write them. */
function compact<T extends Node>(node: T): T {
  visit(node, {
    Pair(_, pair) {
      if (isScalar(pair.key) && (pair.key.value === "args" || pair.key.value === "command") && isSeq(pair.value)) pair.value.flow = true;
    },
  });
  return node;
}

/**
 * Whether the pod already has lastcall: a container named `lastcall` (injected, or written by
 * hand), or one running `lastcall run` or `lastcall shutdown-manager` (Contour's Envoy pod with
 * lastcall swapped in).
 */
function hasSidecar(spec: Record<string, unknown>): boolean {
  return podContainers(spec).some(({ container }) => container.name === SIDECAR_NAME || ["run", "shutdown-manager"].includes(lastcallArgs(container)?.[0] ?? ""));
}

/** The pod's termination grace period in seconds (Kubernetes' default when absent). */
export function graceSeconds(spec: Record<string, unknown>): number {
  const value = spec.terminationGracePeriodSeconds;
  return typeof value === "number" && Number.isInteger(value) && value >= 0 ? value : DEFAULT_GRACE_SECONDS;
}

/**
 * Classic mode: both containers get SIGTERM at once, so each app command runs under `lastcall
 * exec`, which tells the proxy when the app exited: the drain waits for it, and the app's own
 * calls out through Envoy while it shuts down keep working. In a Job, the app's end also quits
 * the proxy (else the sidecar runs forever and the Job never completes). Only an explicit
 * `command` can be wrapped: the image's entrypoint is not in the manifest.
 */
function wrapApps(doc: Document, spec: YAMLMap, template: PodTemplate, options: SidecarOptions, warn: (line: string) => void): void {
  let wrapped = 0;
  let copied = false;
  const quit = template.runsToCompletion;
  const containers = sequence(doc, spec, "containers");
  for (let i = 0; i < containers.items.length; i++) {
    const c = ownItem(doc, containers, i);
    if (!isMap(c)) continue;
    const name = String((valueOf(doc, c) as Record<string, unknown>).name);
    if (name === SIDECAR_NAME) continue;
    const command = ownValue(doc, c, "command");
    if (!isSeq(command) || command.items.length === 0) {
      warn(quit
        ? `${template.ref}: container "${name}" has no command: not wrapped with lastcall exec, so the sidecar keeps running after it ends (set its command, or use --mode native)`
        : `${template.ref}: container "${name}" has no command: not wrapped with lastcall exec, so on termination the sidecar cannot wait for it to exit and its calls out after the last request in flight may fail (set its command, add --app-port to the sidecar, or use --mode native)`);
      continue;
    }
    const original = command.toJSON() as unknown[];
    // Already run under a lastcall of the image's own: nothing to copy.
    if (isWrapped(original)) {
      wrapped++;
      continue;
    }
    const image = (valueOf(doc, c) as Record<string, unknown>).image;
    const lacking = withoutLibc(image);
    if (lacking) {
      warn(`${template.ref}: container "${name}" runs ${String(image)} (${lacking}): lastcall's copy, a glibc executable, cannot run there, so it is not wrapped with lastcall exec (use --mode native)`);
      continue;
    }
    wrapped++;
    // The app's own words stay the nodes they were, quotes and all.
    const replacement = doc.createNode(wrapCommand([], quit, options.statusPort)) as YAMLSeq;
    replacement.items.push(...command.items);
    replacement.flow = command.flow;
    c.set("command", replacement);
    sequence(doc, c, "volumeMounts").items.push(doc.createNode(binMount()));
    copied = true;
  }
  if (quit && wrapped > 1) warn(`${template.ref}: ${wrapped} app containers run under lastcall exec: the first to end starts the proxy's termination, which waits for the others at most --grace (use --mode native)`);
  if (!copied) return;
  sequence(doc, spec, "initContainers").items.push(compact(doc.createNode(installContainer(options.image))));
  addVolume(doc, spec, BIN_VOLUME, binVolume());
}

/** Adds a volume unless the pod already has one by that name. */
function addVolume(doc: Document, spec: YAMLMap, name: string, volume: Record<string, unknown>): void {
  const volumes = sequence(doc, spec, "volumes");
  if (volumes.items.some((v) => (valueOf(doc, v) as { name?: unknown } | null)?.name === name)) return;
  volumes.items.push(doc.createNode(volume));
}

/**
 * The sequence at `map[key]`, created when missing, written as a block (one item per line)
 * unless its parent is itself on one line. A new `initContainers` goes just before
 * `containers`, where people look for it.
 */
function sequence(doc: Document, map: YAMLMap, key: string): YAMLSeq {
  const existing = ownValue(doc, map, key);
  if (isSeq(existing)) {
    existing.flow = false;
    return existing;
  }
  const seq = doc.createNode([]) as YAMLSeq;
  seq.flow = false;
  const pair = doc.createPair(key, seq);
  const at = map.items.findIndex((p) => (p.key as { value?: unknown } | null)?.value === key);
  if (at >= 0) map.items[at] = pair;
  else if (key === "initContainers") {
    const containers = map.items.findIndex((p) => (p.key as { value?: unknown } | null)?.value === "containers");
    map.items.splice(containers >= 0 ? containers : map.items.length, 0, pair);
  } else map.items.push(pair);
  return seq;
}
