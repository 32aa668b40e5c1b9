// What the corpus test compares inject's output with its input by: YAML read as Kubernetes reads
// it, every scalar's written form, and what inject adds or rewires, taken out again.
import YAML, { parseAllDocuments, visit } from "yaml";
import { readWires } from "../../agent/k8s/envoy-wiring.ts";

/** Reads YAML as Kubernetes does (1.1: `0644` is octal); one value per document. */
export const values = (text: string) =>
  parseAllDocuments(text, { version: "1.1", merge: true }).map((d) =>
    d.toJS({ maxAliasCount: -1 })
  );

/** Every one-line scalar as written: `0644`, `"yes"`, `0x3`, with how often it occurs. */
export function scalarForms(text: string): Map<string, number> {
  const forms = new Map<string, number>();
  for (const doc of parseAllDocuments(text, { version: "1.1", merge: true })) {
    visit(doc, {
      Scalar(_, node) {
        if (!node.range) return;
        const form = text.slice(node.range[0], node.range[1]);
        if (!form.includes("\n")) forms.set(form, (forms.get(form) ?? 0) + 1);
      },
    });
  }
  return forms;
}

/** A JSON object. */
export type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);
const SPEC_PATHS: Record<string, string[]> = {
  Pod: ["spec"],
  CronJob: ["spec", "jobTemplate", "spec", "template", "spec"],
};
const ADDED_CONTAINERS = new Set(["lastcall", "lastcall-install"]);
const ADDED_VOLUMES = new Set(["lastcall-config", "lastcall-bin"]);

/** The objects of a document: itself, or a List's items. */
export const objectsOf = (
  value: unknown,
): Obj[] => (isObj(value) && typeof value.kind === "string" && value.kind.endsWith("List") &&
    Array.isArray(value.items)
  ? value.items.filter(isObj)
  : isObj(value)
  ? [value]
  : []);

/** The pod spec of an object, if it is a workload. */
export function podSpecOf(object: Obj): Obj | undefined {
  const path = SPEC_PATHS[String(object.kind)] ?? ["spec", "template", "spec"];
  let at: unknown = object;
  for (const key of path) at = isObj(at) ? at[key] : undefined;
  return isObj(at) ? at : undefined;
}

/**
 * Takes out what inject adds (the sidecar, the install container, their volumes and mounts,
 * `lastcall exec` around app commands), so what is left can be compared with the input.
 */
export function withoutSidecar(output: Obj, input: Obj): Obj {
  const copy = structuredClone(output);
  const inputs = objectsOf(input);
  objectsOf(copy).forEach((object, i) => {
    const spec = podSpecOf(object);
    const before = inputs[i] && podSpecOf(inputs[i]);
    if (!spec || !before) return;
    const drop = (
      key: string,
      keep: (item: Obj) => boolean,
      from: Obj = spec,
      was: Obj | undefined = before,
    ) => {
      if (!Array.isArray(from[key])) return;
      from[key] = (from[key] as Obj[]).filter(keep);
      if ((from[key] as unknown[]).length === 0 && !(was && key in was)) delete from[key];
    };
    drop("initContainers", (c) => !ADDED_CONTAINERS.has(String(c.name)));
    drop("containers", (c) => !ADDED_CONTAINERS.has(String(c.name)));
    drop("volumes", (v) => !ADDED_VOLUMES.has(String(v.name)));
    for (const [j, c] of ((spec.containers as Obj[] | undefined) ?? []).entries()) {
      const command = c.command as string[] | undefined;
      if (command?.[0] === "/lastcall/bin/lastcall" && command[1] === "exec") {
        c.command = command.slice(command.indexOf("--") + 1);
      }
      const was = (before.containers as Obj[])[j];
      drop("volumeMounts", (m) => !ADDED_VOLUMES.has(String(m.name)), c, was);
      // lastcall's preStop, given to an app container that had none.
      const lifecycle = c.lifecycle as Obj | undefined;
      const hook = (lifecycle?.preStop as Obj | undefined)?.httpGet as Obj | undefined;
      if (hook?.path === "/v1/app-stop" && !((was?.lifecycle as Obj | undefined)?.preStop)) {
        delete lifecycle!.preStop;
        if (Object.keys(lifecycle!).length === 0 && !(was && "lifecycle" in was)) {
          delete c.lifecycle;
        }
      }
    }
  });
  return copy;
}

/**
 * Takes out what inject's wiring changes, so what is left can be compared with the input: the
 * ConfigMaps it wrote, the names it moved from app ports to Envoy's (and the probes using them),
 * the Services' targetPorts it pointed at Envoy's listeners (read from those ConfigMaps).
 */
export function withoutWiring(values: unknown[], inputs: unknown[]): unknown[] {
  const known = new Set(inputs.flatMap(objectsOf).map((o) => JSON.stringify(o)));
  const added = (o: unknown) =>
    isObj(o) && o.kind === "ConfigMap" &&
    /-lastcall-envoy$/.test(String((o.metadata as Obj)?.name)) && !known.has(JSON.stringify(o));
  const appPortOf = new Map<number, number>();
  for (const o of values.flatMap(objectsOf).filter(added)) {
    for (const l of readWires(YAML.parse(String((o.data as Obj)["envoy.yaml"]))).listeners) {
      appPortOf.set(l.port, l.appPorts[0]);
    }
  }
  const kept = structuredClone(values.filter((v) => !added(v)));
  for (const v of kept) {
    if (isObj(v) && Array.isArray(v.items)) v.items = v.items.filter((item) => !added(item));
  }
  kept.forEach((v, i) =>
    objectsOf(v).forEach((o, j) => {
      const input = objectsOf(inputs[i])[j];
      if (o.kind === "Service") {
        ((o.spec as Obj)?.ports as Obj[] ?? []).forEach((p, k) => {
          const was = ((input?.spec as Obj)?.ports as Obj[] | undefined)?.[k];
          if (typeof p.targetPort !== "number" || !appPortOf.has(p.targetPort)) return;
          if (was && !("targetPort" in was)) delete p.targetPort;
          else p.targetPort = appPortOf.get(p.targetPort);
        });
      }
      const spec = podSpecOf(o);
      const sidecar = [
        ...((spec?.initContainers as Obj[]) ?? []),
        ...((spec?.containers as Obj[]) ?? []),
      ].find((c) => c.name === "lastcall");
      for (const port of (sidecar?.ports as Obj[] | undefined) ?? []) {
        const appPort = appPortOf.get(Number(port.containerPort));
        if (typeof port.name !== "string" || appPort === undefined) continue;
        for (const c of (spec!.containers as Obj[]).filter((c) => c !== sidecar)) {
          const own = ((c.ports as Obj[] | undefined) ?? []).find((p) =>
            p.containerPort === appPort && typeof p.name === "string"
          );
          if (!own) continue;
          const renamed = own.name;
          own.name = port.name;
          for (const key of ["livenessProbe", "readinessProbe", "startupProbe"]) {
            for (const kind of ["httpGet", "tcpSocket"]) {
              const handler = (c[key] as Obj | undefined)?.[kind] as Obj | undefined;
              if (handler && handler.port === renamed) handler.port = port.name;
            }
          }
        }
      }
      // An app's readiness probe sent through Envoy's listener (native) probed the app before.
      const originals = (podSpecOf(input)?.containers as Obj[] | undefined) ?? [];
      for (
        const c of ((spec?.containers as Obj[] | undefined) ?? []).filter((c) => c !== sidecar)
      ) {
        const http = (c.readinessProbe as Obj | undefined)?.httpGet as Obj | undefined;
        if (!http || typeof http.port !== "number" || !appPortOf.has(http.port)) continue;
        const was = originals.find((i) => i.name === c.name)?.readinessProbe as Obj | undefined;
        http.port = (was?.httpGet as Obj | undefined)?.port;
      }
    })
  );
  return kept;
}

/**
 * The names and port numbers inject's wiring moves: the sidecar's port names, the app ports
 * behind listeners.
 */
export function wiredForms(values: unknown[]): Set<string> {
  const forms = new Set<string>();
  for (const o of values.flatMap(objectsOf)) {
    const spec = podSpecOf(o);
    const sidecar = [
      ...((spec?.initContainers as Obj[]) ?? []),
      ...((spec?.containers as Obj[]) ?? []),
    ].find((c) => c.name === "lastcall");
    for (const p of (sidecar?.ports as Obj[] | undefined) ?? []) {
      if (typeof p.name === "string") forms.add(p.name);
    }
    if (o.kind === "ConfigMap" && /-lastcall-envoy$/.test(String((o.metadata as Obj)?.name))) {
      for (const l of readWires(YAML.parse(String((o.data as Obj)["envoy.yaml"]))).listeners) {
        for (const port of l.appPorts) {
          forms.add(String(port));
        }
      }
    }
  }
  return forms;
}
