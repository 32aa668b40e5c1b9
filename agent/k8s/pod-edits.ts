// Edits to a pod template's YAML nodes for `lastcall inject`: the classic apps' `lastcall exec`
// wrap, the apps' preStop hooks, volumes, and sequences created where people look for them.
import {
  type Document,
  isMap,
  isScalar,
  isSeq,
  type Node,
  visit,
  type YAMLMap,
  type YAMLSeq,
} from "yaml";
import { ownItem, ownValue, valueOf } from "./own-node.ts";
import type { PodTemplate } from "./workloads.ts";
import { withoutLibc } from "./app-images.ts";
import {
  appStopHook,
  BIN_VOLUME,
  binMount,
  binVolume,
  installContainer,
  isWrapped,
  SIDECAR_NAME,
  type SidecarOptions,
  wrapCommand,
} from "./sidecar.ts";

/** Writes command lines on one line (`args: [run, --config, …]`), as people write them. */
export function compact<T extends Node>(node: T): T {
  visit(node, {
    Pair(_, pair) {
      if (
        isScalar(pair.key) && (pair.key.value === "args" || pair.key.value === "command") &&
        isSeq(pair.value)
      ) pair.value.flow = true;
    },
  });
  return node;
}

/**
 * Classic mode: both containers get SIGTERM at once, so each app command runs under `lastcall
 * exec`, which tells the proxy when the app exited: the drain waits for it, and the app's own
 * calls out through Envoy while it shuts down keep working. In a Job, the app's end also quits
 * the proxy (else the sidecar runs forever and the Job never completes). Only an explicit
 * `command` can be wrapped: the image's entrypoint is not in the manifest.
 */
export function wrapApps(
  doc: Document,
  spec: YAMLMap,
  template: PodTemplate,
  options: SidecarOptions,
  warn: (line: string) => void,
): void {
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
      warn(
        quit
          ? `${template.ref}: container "${name}" has no command: not wrapped with lastcall exec, so the sidecar keeps running after it ends (set its command, or use --mode native)`
          : `${template.ref}: container "${name}" has no command: not wrapped with lastcall exec, so on termination the sidecar cannot wait for it to exit and its calls out after the last request in flight may fail (set its command, add --app-port to the sidecar, or use --mode native)`,
      );
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
      warn(
        `${template.ref}: container "${name}" runs ${
          String(image)
        } (${lacking}): lastcall's copy, a glibc executable, cannot run there, so it is not wrapped with lastcall exec (use --mode native)`,
      );
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
  if (quit && wrapped > 1) {
    warn(
      `${template.ref}: ${wrapped} app containers run under lastcall exec: the first to end starts the proxy's termination, which waits for the others at most --grace (use --mode native)`,
    );
  }
  if (!copied) return;
  sequence(doc, spec, "initContainers").items.push(
    compact(doc.createNode(installContainer(options.image))),
  );
  addVolume(doc, spec, BIN_VOLUME, binVolume());
}

/**
 * Gives each app container without a preStop lastcall's: `GET /v1/app-stop` on the status
 * port, so its SIGTERM waits for the proxy's inbound quiet. An app's own preStop is kept.
 */
export function addAppStopHooks(doc: Document, spec: YAMLMap, statusPort: number): void {
  const containers = sequence(doc, spec, "containers");
  for (let i = 0; i < containers.items.length; i++) {
    const c = ownItem(doc, containers, i);
    if (!isMap(c) || (valueOf(doc, c) as Record<string, unknown>).name === SIDECAR_NAME) continue;
    const lifecycle = ownValue(doc, c, "lifecycle");
    if (isMap(lifecycle)) {
      if (lifecycle.has("preStop")) continue;
      lifecycle.set("preStop", doc.createNode(appStopHook(statusPort)));
    } else c.set("lifecycle", doc.createNode({ preStop: appStopHook(statusPort) }));
  }
}

/** Adds a volume unless the pod already has one by that name. */
export function addVolume(
  doc: Document,
  spec: YAMLMap,
  name: string,
  volume: Record<string, unknown>,
): void {
  const volumes = sequence(doc, spec, "volumes");
  if (volumes.items.some((v) => (valueOf(doc, v) as { name?: unknown } | null)?.name === name)) {
    return;
  }
  volumes.items.push(doc.createNode(volume));
}

/**
 * The sequence at `map[key]`, created when missing, written as a block (one item per line)
 * unless its parent is itself on one line. A new `initContainers` goes just before
 * `containers`, where people look for it.
 */
export function sequence(doc: Document, map: YAMLMap, key: string): YAMLSeq {
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
    const containers = map.items.findIndex((p) =>
      (p.key as { value?: unknown } | null)?.value === "containers"
    );
    map.items.splice(containers >= 0 ? containers : map.items.length, 0, pair);
  } else map.items.push(pair);
  return seq;
}
