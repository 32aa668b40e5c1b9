// Property: on any workload, inject's output is a valid workload with one lastcall sidecar, the
// app containers survive, and injecting the output again gives the same bytes.
import fc from "fast-check";
import { isDeepStrictEqual } from "node:util";
import { describe, expect, it } from "vitest";
import YAML from "yaml";
import { injectManifest } from "../../agent/k8s/inject.ts";
import { MANIFEST_YAML } from "../../agent/k8s/manifest.ts";
import { SIDECAR_DEFAULTS } from "../../agent/k8s/sidecar.ts";
import { validateWorkload } from "./schema.ts";
import { KINDS, objects, specOf, workload } from "./workloads.ts";
import type { Json } from "../support/json.ts";

const word = fc.stringMatching(/^[a-z][a-z0-9-]{0,8}$/);
/** Command-line words, YAML-hostile ones included (`: `, `#`, quotes, `---`, newlines). */
const argWord = fc.oneof(
  fc.string({ minLength: 1, maxLength: 10 }),
  fc.constantFrom("--", "---", "# x", "a: b", "'q'", '"q"', "yes", "1.0", "null", "line\nbreak"),
);

const container = (name: string) =>
  fc.record({
    image: word.map((w) => `example/${w}:1`),
    command: fc.option(fc.array(argWord, { minLength: 1, maxLength: 3 }), { nil: undefined }),
    args: fc.option(fc.array(argWord, { maxLength: 3 }), { nil: undefined }),
    preStopSeconds: fc.option(fc.integer({ min: 1, max: 60 }), { nil: undefined }),
    ports: fc.uniqueArray(fc.integer({ min: 1, max: 65535 }), { maxLength: 2 }),
  }).map(({ image, command, args, preStopSeconds, ports }) => ({
    name,
    image,
    ...(command && { command }),
    ...(args && { args }),
    ...(preStopSeconds && { lifecycle: { preStop: { sleep: { seconds: preStopSeconds } } } }),
    ...(ports.length && { ports: ports.map((containerPort) => ({ containerPort })) }),
  }));

const podSpec = fc.record({
  names: fc.uniqueArray(fc.oneof(word, fc.constant("lastcall")), { minLength: 1, maxLength: 3 }),
  initNames: fc.uniqueArray(word.map((w) => `init-${w}`), { maxLength: 2 }),
  grace: fc.option(fc.integer({ min: 0, max: 120 }), { nil: undefined }),
  volume: fc.boolean(),
}).chain(({ names, initNames, grace, volume }) =>
  fc.tuple(
    fc.tuple(...names.map(container)),
    fc.constant(initNames),
    fc.constant(grace),
    fc.constant(volume),
  )
).map(([containers, initNames, grace, volume]) => ({
  containers,
  ...(initNames.length &&
    { initContainers: initNames.map((name) => ({ name, image: "example/init:1" })) }),
  ...(grace !== undefined && { terminationGracePeriodSeconds: grace }),
  ...(volume && { volumes: [{ name: "data", emptyDir: {} }] }),
}));

const document = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.tuple(fc.constantFrom(...KINDS), podSpec, word).map(([kind, spec, name]) =>
      workload(kind, spec, name)
    ),
  },
  {
    weight: 1,
    arbitrary: word.map((name) => ({
      apiVersion: "v1",
      kind: "ConfigMap",
      metadata: { name },
      data: { "envoy.yaml": "static_resources: {}\n" },
    })),
  },
);

const manifestText = fc.tuple(fc.array(document, { minLength: 1, maxLength: 4 }), fc.boolean()).map(
  ([docs, indentSeq]) => docs.map((d) => YAML.stringify(d, { indentSeq })).join("---\n"),
);

/** Two ConfigMaps of one name, as a manifest may carry (kubectl applies both): a counterexample. */
const TWIN_CONFIG_MAPS = [1, 2].map(() =>
  YAML.stringify({
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: { name: "b2" },
    data: { "envoy.yaml": "static_resources: {}\n" },
  })
).join("---\n");

describe("inject on generated workloads", () => {
  it("is idempotent and keeps workloads valid", () => {
    fc.assert(
      fc.property(
        manifestText,
        fc.constantFrom("native", "classic") as fc.Arbitrary<"native" | "classic">,
        (text, mode) => {
          const options = { ...SIDECAR_DEFAULTS, mode };
          const once = injectManifest(text, options);
          const twice = injectManifest(once.text, options);
          expect(twice.text).toBe(once.text);
          expect(twice.injected).toBe(0);

          const before = objects(text);
          // Names as Kubernetes reads them (YAML 1.1: an unquoted `n` is a boolean, no name).
          const kubeNames = YAML.parseAllDocuments(text, MANIFEST_YAML).map((d) =>
            d.toJS()?.metadata?.name
          );
          // The ConfigMaps inject wrote, one right after each workload it wired.
          const all = objects(once.text);
          const after = all.filter((o, i) =>
            !(o.kind === "ConfigMap" && /-lastcall-envoy$/.test(o.metadata.name) &&
              !before.some((b) => isDeepStrictEqual(b, o)) && i > 0)
          );
          expect(after).toHaveLength(before.length);
          // Each ConfigMap inject writes has a name of its own, taken by no other object in the
          // output (the input's own ConfigMaps may repeat a name: they are passed through).
          const configMaps = (os: Json[]) =>
            os.filter((o) => o.kind === "ConfigMap").map((o) => o.metadata.name);
          expect(new Set(configMaps(all)).size - new Set(configMaps(before)).size)
            .toBe(configMaps(all).length - configMaps(before).length);
          after.forEach((object, i) => {
            if (object.kind === "ConfigMap") return expect(object).toEqual(before[i]);
            validateWorkload(object);
            const spec = specOf(object);
            const original = specOf(before[i]);
            const named = (s: Json) =>
              [...s.containers, ...(s.initContainers ?? [])].filter((c) => c.name === "lastcall");
            // Already has a sidecar, too short a grace period for one, no port to wire, another
            // object of its kind and name in the manifest, or a name that is no string to
            // Kubernetes: left as is.
            const ported = original.containers.some((c: Json) => c.ports?.length);
            const twin = before.some((b, j) =>
              j !== i && b.kind === object.kind && b.metadata.name === object.metadata.name
            );
            if (
              named(original).length || (original.terminationGracePeriodSeconds ?? 30) < 8 ||
              !ported || twin || typeof kubeNames[i] !== "string"
            ) return expect(object).toEqual(before[i]);
            expect(named(spec)).toHaveLength(1);
            const apps = (s: Json) =>
              s.containers.filter((c: Json) => c.name !== "lastcall").map((
                c: Json,
              ) => [c.name, c.image, c.args]);
            expect(apps(spec)).toEqual(apps(original));
          });
        },
      ),
      { numRuns: 300, examples: [[TWIN_CONFIG_MAPS, "native"]] },
    );
  });
});

describe("inject of JSON", () => {
  it("gives the objects and lines it gives for the same manifest in YAML, and reads its output", () => {
    fc.assert(
      fc.property(
        fc.array(document, { minLength: 1, maxLength: 3 }),
        fc.constantFrom("native", "classic") as fc.Arbitrary<"native" | "classic">,
        (docs, mode) => {
          const options = { ...SIDECAR_DEFAULTS, mode };
          // YAML as Kubernetes reads it (1.1: a `y` name is quoted, as JSON has it).
          const yaml = injectManifest(
            docs.map((d) => YAML.stringify(d, { version: "1.1" })).join("---\n"),
            options,
          );
          // JSON objects one after the other, as kubectl reads them.
          const json = injectManifest(
            `${docs.map((d) => JSON.stringify(d, null, 2)).join("\n")}\n`,
            options,
          );
          expect(json.text.split(/\n(?=[{[])/).map((piece) => JSON.parse(piece)))
            .toEqual(objects(yaml.text));
          expect(json.warnings).toEqual(yaml.warnings);
          expect(injectManifest(json.text, options).text).toBe(json.text);
        },
      ),
      { numRuns: 200 },
    );
  });
});
