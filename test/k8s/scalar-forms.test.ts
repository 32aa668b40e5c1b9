// Property: whatever form a scalar is written in (YAML 1.1 octal and hex, quoted look-alikes of
// booleans and numbers, nulls, floats, flow or block context), inject prints it back exactly as
// written and Kubernetes' YAML 1.1 reader reads the same value from the output.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { parseDocument } from "yaml";
import { injectManifest } from "../../agent/k8s/inject.ts";
import { SIDECAR_DEFAULTS } from "../../agent/k8s/sidecar.ts";

/** Scalar forms that a printer working from values would change. */
const form = fc.oneof(
  fc.constantFrom(
    "0644",
    "0755",
    "012",
    "0x1F",
    "0xff",
    "1e3",
    "1.50",
    ".5",
    "+12",
    "-0",
    "~",
    "null",
    "Null",
    "yes",
    "No",
    "on",
    "OFF",
    "y",
    "true",
  ),
  fc.constantFrom(
    `"0644"`,
    `'yes'`,
    `"on"`,
    `"1.0"`,
    `'it''s'`,
    `"tab\\there"`,
    `"\\u00e9"`,
    `""`,
    `''`,
  ),
  fc.integer({ min: 0, max: 511 }).map((n) => `0${n.toString(8)}`),
  fc.stringMatching(/^[a-z][a-z0-9.-]{0,10}$/),
);

const manifest = fc.tuple(fc.array(form, { minLength: 1, maxLength: 6 }), fc.boolean()).map(
  ([forms, flow]) => {
    const annotations = flow
      ? `    annotations: {${forms.map((f, i) => `k${i}: ${f}`).join(", ")}}\n`
      : `    annotations:\n${forms.map((f, i) => `      k${i}: ${f}\n`).join("")}`;
    return `apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  template:\n    metadata:\n${annotations}    spec:\n      containers:\n      - name: web\n        image: example/web:1\n        ports: [{containerPort: 80}]\n`;
  },
);

const read = (text: string) =>
  parseDocument(text, { version: "1.1" }).toJS() as { spec: { template: { metadata: unknown } } };

describe("inject keeps every scalar's form", () => {
  it("forms and YAML 1.1 values of the template's annotations are unchanged", () => {
    fc.assert(
      fc.property(
        manifest,
        fc.constantFrom("native", "classic") as fc.Arbitrary<"native" | "classic">,
        (text, mode) => {
          const out = injectManifest(text, { ...SIDECAR_DEFAULTS, mode });
          expect(out.injected).toBe(1);
          const [annotations] = text.split("    spec:\n");
          expect(out.text.startsWith(annotations)).toBe(true);
          expect(read(out.text).spec.template.metadata).toEqual(read(text).spec.template.metadata);
        },
      ),
      { numRuns: 300 },
    );
  });
});
