// `lastcall inject`: adds the sidecar to every pod template of a manifest. Edits go through
// the YAML syntax tree, so the user's comments and layout survive in the documents it touches,
// and documents it does not touch are printed back byte for byte.
import { type Document, isMap, isScalar, isSeq, type Node, visit, type YAMLMap, type YAMLSeq } from "yaml";
import { type ManifestDocument, readManifest, renderManifest } from "./manifest.ts";
import { ownIn, ownItem, ownValue, valueOf } from "./own-node.ts";
import { findPodTemplate, isRecord, type PodTemplate } from "./workloads.ts";
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
  type SidecarOptions,
  wrapCommand,
} from "./sidecar.ts";

/** What {@linkcode injectManifest} produced. */
export interface InjectResult {
  /** The manifest with the sidecar added. */
  text: string;
  /** One line per thing the user should know (containers not wrapped, pods left alone). */
  warnings: string[];
  /** How many pod templates got the sidecar. */
  injected: number;
}

/**
 * Adds the lastcall sidecar to each Pod, Deployment, StatefulSet, DaemonSet, Job and CronJob
 * of a manifest; other documents, and pods that already have a `lastcall` container, are
 * printed back unchanged, so injecting twice gives the same bytes as injecting once.
 *
 * @example
 * ```ts
 * const { text, warnings } = injectManifest(readFileSync("deploy.yaml", "utf8"), SIDECAR_DEFAULTS);
 * ```
 * @throws {ManifestError} when the manifest is not YAML
 */
export function injectManifest(text: string, options: SidecarOptions): InjectResult {
  const documents = readManifest(text);
  const changed = new Set<ManifestDocument>();
  const warnings: string[] = [];
  for (const d of documents) {
    if (injectDocument(d.doc, options, (line) => warnings.push(line))) changed.add(d);
  }
  // A file of comments only holds no document: it comes back as it is.
  return { text: documents.length ? renderManifest(documents, changed) : text, warnings, injected: changed.size };
}

/** Adds the sidecar to one document's pod template; returns whether the document changed. */
export function injectDocument(doc: Document, options: SidecarOptions, warn: (line: string) => void): boolean {
  const template = findPodTemplate(doc.toJS());
  if (!template) return false;
  // Made the document's own along the way: a spec or containers from an anchor are copied here.
  const spec = ownIn(doc, template.specPath);
  if (!template.spec || !isMap(spec) || !Array.isArray(template.spec.containers) || template.spec.containers.length === 0) {
    warn(`${template.ref}: no containers at ${template.specPath.join(".")}.containers: left as is`);
    return false;
  }
  if (hasSidecar(template.spec)) return false;
  const grace = graceSeconds(template.spec);
  if (grace < MIN_GRACE_SECONDS) {
    warn(`${template.ref}: terminationGracePeriodSeconds ${grace} leaves lastcall no time to drain (it needs at least ${MIN_GRACE_SECONDS}): left as is`);
    return false;
  }
  const container = compact(doc.createNode(sidecarContainer(grace, options), { aliasDuplicateObjects: false }));
  if (options.mode === "native") {
    // Last among the init containers: the pod's own init steps run as before, and the app
    // containers start once the proxy's startup probe passes.
    sequence(doc, spec, "initContainers").items.push(container);
  } else {
    sequence(doc, spec, "containers").items.unshift(container);
  }
  addVolume(doc, spec, CONFIG_VOLUME, configVolume(options.configMap));
  if (options.mode === "classic") wrapApps(doc, spec, template, options, warn);
  return true;
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

/** Whether the pod already has a container named `lastcall` (injected, or written by hand). */
function hasSidecar(spec: Record<string, unknown>): boolean {
  return ["containers", "initContainers"].some((key) =>
    Array.isArray(spec[key]) && (spec[key] as unknown[]).some((c) => isRecord(c) && c.name === SIDECAR_NAME)
  );
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
    wrapped++;
    const original = command.toJSON() as unknown[];
    // Already run under a lastcall of the image's own: nothing to copy.
    if (isWrapped(original)) continue;
    const replacement = doc.createNode(wrapCommand(original.map(String), quit));
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
