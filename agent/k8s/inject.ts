// `lastcall inject`: adds the sidecar to every pod template of a manifest. Edits go through
// the YAML syntax tree, so the user's comments and layout survive in the documents it touches,
// and documents it does not touch are printed back byte for byte.
import { Document, isMap, isSeq, type YAMLMap } from "yaml";
import {
  jsonPieces,
  MANIFEST_YAML,
  type ManifestDocument,
  readManifest,
  renderManifest,
} from "./manifest.ts";
import { ownIn, ownValue, valueOf } from "./own-node.ts";
import { findPodTemplate, getPath, type PodTemplate } from "./workloads.ts";
import { podContainers } from "./containers.ts";
import { hasSidecar, optedOut, refusalOf, unknownKind } from "./inject-refusals.ts";
import { ownPorts } from "./envoy-wiring.ts";
import { renderJson } from "./json-out.ts";
import {
  configMapObject,
  contextOf,
  nameRefusal,
  objectKey,
  objectsOf,
  renameAppPorts,
  rewireServices,
  sidecarPorts,
  type Wiring,
  type WiringContext,
  wiringOf,
  workloadRef,
} from "./inject-wiring.ts";
import { bypasses, selects, serviceOf } from "./services.ts";
import { configSource, seenConfig } from "./check-wiring.ts";
import { type HoldApp, holdReason } from "./hold.ts";
import { readinessThroughEnvoy, throughEnvoyNote } from "./probe-wiring.ts";
import { addAppStopHooks, addVolume, compact, sequence, wrapApps } from "./pod-edits.ts";
import {
  ADMIN_PORT,
  CONFIG_VOLUME,
  configVolume,
  graceSeconds,
  MAX_GRACE_SECONDS,
  SIDECAR_NAME,
  sidecarContainer,
  type SidecarOptions,
  STATUS_PORT,
} from "./sidecar.ts";
import { MAX_DURATION_TEXT } from "../lib/duration.ts";

/** Options of {@linkcode injectManifest}: the sidecar's, and what inject may touch. */
export interface InjectOptions extends SidecarOptions {
  /**
   * Inject pods with `hostNetwork: true` too: their sidecar takes the node's ports (the status
   * port, Envoy's admin and listeners), once per node. @default false
   */
  hostNetwork?: boolean;
  /**
   * Whether the apps wait for Envoy at start: `auto` only where the pod's Envoy config may carry
   * the app's calls out (a user's ConfigMap that inject cannot show to be inbound only).
   * @default "auto"
   */
  holdApp?: HoldApp;
}

/** What {@linkcode injectManifest} produced. */
export interface InjectResult {
  /** The manifest with the sidecar added, in the input's format (YAML, or JSON for JSON). */
  text: string;
  /** One line per thing the user should know (containers not wrapped, pods left alone). */
  warnings: string[];
  /** One line per thing inject wired: a ConfigMap written, a Service pointed at Envoy. */
  notes: string[];
  /** How many pod templates got the sidecar. */
  injected: number;
  /** How many pod templates were left as they are for a reason a warning gives (not opt-outs). */
  refused: number;
}

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
  const added = new Map<ManifestDocument, ManifestDocument[]>();
  const warnings: string[] = [];
  const notes: string[] = [];
  const context = contextOf(documents);
  let refused = 0;
  let injected = 0;
  for (const d of documents) {
    for (const object of objectsOf(d.doc)) {
      const done = injectObject(d.doc, object, options, context, (line, refusal) => {
        warnings.push(line);
        if (refusal) refused++;
      });
      if (!done) continue;
      injected++;
      changed.add(d);
      notes.push(...done.notes);
      for (const s of context.services) {
        if (done.rewired.has(s.doc)) changed.add(documents.find((x) => x.doc === s.doc)!);
      }
      if (done.configMap) addAfter(d, object, done.configMap, added);
    }
  }
  for (const d of documents) {
    for (const object of objectsOf(d.doc)) warnings.push(...bypassesOf(d.doc, object, context));
  }
  const all = documents.flatMap((d) => [d, ...(added.get(d) ?? [])]);
  for (const list of added.values()) for (const d of list) changed.add(d);
  // A file of comments only holds no document: it comes back as it is.
  const out = documents.length === 0 || changed.size === 0
    ? text
    : jsonPieces(text)
    ? renderJson(all, text)
    : renderManifest(all, changed);
  return { text: out, warnings, notes, injected, refused };
}

/**
 * Puts the generated ConfigMap right after its workload: as the next item of a List, else as
 * a new document after the workload's.
 */
function addAfter(
  d: ManifestDocument,
  object: YAMLMap,
  configMap: Record<string, unknown>,
  added: Map<ManifestDocument, ManifestDocument[]>,
): void {
  if (object !== d.doc.contents) {
    const items = ownValue(d.doc, d.doc.contents as YAMLMap, "items");
    if (isSeq(items)) {
      items.items.splice(items.items.indexOf(object) + 1, 0, d.doc.createNode(configMap));
    }
    return;
  }
  const doc = new Document(configMap, { version: MANIFEST_YAML.version });
  doc.directives!.docStart = true;
  const list = added.get(d) ?? [];
  list.push({ index: d.index, doc: doc as Document.Parsed, source: d.source });
  added.set(d, list);
}

/** The Services that still reach an app container of a pod with lastcall, not its Envoy. */
function bypassesOf(doc: Document, object: YAMLMap, context: WiringContext): string[] {
  const value = valueOf(doc, object) as Record<string, unknown>;
  const template = findPodTemplate(value);
  if (!template?.spec || !hasSidecar(template.spec)) return [];
  const namespace = getPath(value, ["metadata", "namespace"]) as string | undefined;
  const apps = new Set(
    podContainers(template.spec).filter((c) => !c.init && c.container.name !== SIDECAR_NAME).map((
      c,
    ) => String(c.container.name)),
  );
  const sidecar =
    podContainers(template.spec).find((c) => c.container.name === SIDECAR_NAME)!.container;
  const source = configSource(template.spec, sidecar);
  const seen = source && seenConfig(context, namespace, source);
  const listenerFor = (port: number) =>
    seen?.listeners.find((l) => l.appPorts.includes(port))?.port;
  // Read again: inject may have rewired them.
  const services = context.services.map((s) => serviceOf(valueOf(s.doc, s.node))!);
  return services.filter((s) => selects(s, template, namespace))
    .flatMap((s) =>
      bypasses(s, template.spec!, apps, listenerFor).map((line) => `${template.ref}: ${line}`)
    );
}

/** What injecting one object did. */
interface Injected {
  notes: string[];
  /** Documents whose Services were rewired. */
  rewired: Set<Document>;
  /** The ConfigMap to add after the workload, when inject writes one. */
  configMap?: Record<string, unknown>;
}

/** Adds the sidecar to one object's pod template; undefined when the object is left as is. */
function injectObject(
  doc: Document,
  object: YAMLMap,
  options: InjectOptions,
  context: WiringContext,
  warn: (line: string, refusal: boolean) => void,
): Injected | undefined {
  const value = valueOf(doc, object) as Record<string, unknown>;
  const template = findPodTemplate(value);
  if (!template) {
    const line = unknownKind(value);
    if (line) warn(line, false);
    return undefined;
  }
  if (
    !template.spec || !Array.isArray(template.spec.containers) ||
    template.spec.containers.length === 0
  ) {
    warn(
      `${template.ref}: no containers at ${template.specPath.join(".")}.containers: left as is`,
      true,
    );
    return undefined;
  }
  if (hasSidecar(template.spec) || optedOut(value, template)) return undefined;
  const badName = nameRefusal(value);
  if (badName) {
    warn(`${template.ref}: ${badName}: left as is`, true);
    return undefined;
  }
  const copies = getPath(value, ["metadata", "name"]) === undefined
    ? 1
    : context.objects.get(objectKey(value)) ?? 1;
  if (copies > 1) {
    warn(
      `${template.ref}: ${
        workloadRef(value)
      } is ${copies} times in this manifest (the API keeps one): left as is`,
      true,
    );
    return undefined;
  }
  const own = ownPorts(template.spec);
  const wiring = refusalOf(template, options.hostNetwork === true) ??
    wiringOf(value, template, options.configMap, [own.status, own.admin], context);
  if (typeof wiring === "string") {
    warn(`${template.ref}: ${wiring}`, true);
    return undefined;
  }
  // Made the document's own along the way: a spec or containers from an anchor are copied here.
  const spec = ownIn(doc, template.specPath, object);
  if (!isMap(spec)) return undefined;
  const before = structuredClone(template.spec);
  const grace = graceSeconds(template.spec);
  if (grace > MAX_GRACE_SECONDS) {
    const line =
      `is longer than lastcall can time (${MAX_DURATION_TEXT}): --grace ${MAX_GRACE_SECONDS}s`;
    warn(`${template.ref}: terminationGracePeriodSeconds ${grace} ${line}`, false);
  }
  const namespace = getPath(value, ["metadata", "namespace"]);
  const hold = holdReason(options.holdApp ?? "auto", wiring, context, namespace);
  const wires = wiring.wires ?? [];
  renameAppPorts(doc, spec, wires);
  // Native: the sidecar starts first, so its Envoy serves before the kubelet first probes an app.
  const throughEnvoy = options.mode === "native" ? readinessThroughEnvoy(doc, spec, wires) : [];
  const sidecar = {
    ...options,
    statusPort: own.status,
    adminPort: own.admin,
    ports: sidecarPorts(wires),
    hold: hold !== undefined,
    readiness: throughEnvoy.length === 0,
  };
  const container = compact(
    doc.createNode(sidecarContainer(grace, sidecar), { aliasDuplicateObjects: false }),
  );
  const moves = [
    { port: STATUS_PORT, what: "lastcall's status server", now: own.status },
    { port: ADMIN_PORT, what: "Envoy's admin", now: own.admin },
  ].filter((m) => m.now !== m.port);
  for (const { port, what, now } of moves) {
    warn(`${template.ref}: port ${port} is taken in this pod: ${what} uses ${now}`, false);
  }
  if (options.mode === "native") {
    // Last among the init containers: the pod's own init steps run as before, and the app
    // containers start once the proxy's startup probe passes.
    sequence(doc, spec, "initContainers").items.push(container);
  } else if (hold !== undefined) {
    // First: its postStart hook (`lastcall wait`) holds the containers after it.
    sequence(doc, spec, "containers").items.unshift(container);
  } else {
    // Last: the kubelet starts the apps' containers before lastcall's start takes the CPU, so
    // the pod's first sync ends sooner (docs/kubernetes.md, on the pods' second).
    sequence(doc, spec, "containers").items.push(container);
  }
  addVolume(doc, spec, CONFIG_VOLUME, configVolume(wiring.configMap));
  addAppStopHooks(doc, spec, own.status);
  // Without the hold, a long-running app needs no wrap: its preStop orders its SIGTERM after
  // the inbound quiet. A Job's app keeps it: its end is what quits a classic sidecar.
  if (options.mode === "classic" && (hold || template.runsToCompletion)) {
    wrapApps(doc, spec, template, sidecar, (line) => warn(line, false));
  }
  const done = wired(value, template, wiring, context, before);
  done.notes.push(...throughEnvoy.map((p) => `${template.ref}: ${throughEnvoyNote(p)}`));
  if (hold) {
    done.notes.push(
      `${template.ref}: the app waits for Envoy to be ready at start (${hold}; --hold-app never to start it at once)`,
    );
  }
  return done;
}

/** The notes, Service edits and ConfigMap of a pod's wiring. */
function wired(
  value: Record<string, unknown>,
  template: PodTemplate,
  wiring: Wiring,
  context: WiringContext,
  spec: Record<string, unknown>,
): Injected {
  const notes: string[] = [];
  const wires = wiring.wires ?? [];
  const fronts = wires.map((w) => `${w.listenerPort} → app port ${w.appPort}`).join(", ");
  if (wiring.generate) {
    notes.push(
      `${template.ref}: Envoy config in ConfigMap ${wiring.configMap} (a new document after it): listeners ${fronts}`,
    );
  } else if (wiring.wires) {
    notes.push(
      `${template.ref}: Envoy config is your ConfigMap ${wiring.configMap}: ${
        fronts ? `listeners ${fronts}` : "no listener to a declared app port"
      }`,
    );
  } else {notes.push(
      `${template.ref}: Envoy config is your ConfigMap ${wiring.configMap}, not in this manifest: Services not rewired, listeners not checked`,
    );}
  const namespace = getPath(value, ["metadata", "namespace"]) as string | undefined;
  const before = new Map(context.services.map((s) => [s, JSON.stringify(s.node.toJSON())]));
  notes.push(
    ...rewireServices(template, namespace, wires, context, spec).map((line) =>
      `${template.ref}: ${line}`
    ),
  );
  const rewired = new Set(
    context.services.filter((s) => before.get(s) !== JSON.stringify(s.node.toJSON())).map((s) =>
      s.doc
    ),
  );
  return {
    notes,
    rewired,
    ...(wiring.generate ? { configMap: configMapObject(value, wiring.configMap, wires) } : {}),
  };
}
