// Scalars keep the form their author wrote (`0644`, `0x1F`, escapes, folded blocks) when `inject`
// prints a manifest back.
import { type Document, isScalar, type Scalar, visit } from "yaml";

/** How a scalar was written, and the value it was read as. */
interface Written {
  value: unknown;
  /** A one-line scalar's text. */
  text: string;
  /** A folded block scalar (`>`), whose line breaks the printer would move. */
  folded?: { header: string; lines: string[] };
}

/**
 * A folded block scalar's header and lines without their common indentation; undefined for
 * forms kept out of this (an indentation indicator, a comment, keep chomping `>+`).
 */
function foldedForm(text: string): Written["folded"] {
  const [header, ...rest] = text.replace(/\n+$/, "").split("\n");
  if (!/^>-?$/.test(header) || rest.length === 0) return undefined;
  const indent = /^ */.exec(rest.find((line) => line.trim() !== "") ?? "")![0];
  if (indent === "" || rest.some((line) => line.trim() !== "" && !line.startsWith(indent))) {
    return undefined;
  }
  return {
    header,
    lines: rest.map((line) => (line.trim() === "" ? "" : line.slice(indent.length))),
  };
}

/** A scalar tag of the document's schema, as far as this module uses it. */
interface ScalarTag {
  collection?: unknown;
  stringify?: (node: Scalar, ...rest: never[]) => string;
}

/**
 * Makes `doc` print each scalar read from `source` (the whole text `doc` was parsed from)
 * exactly as it was written, when it is on one line and its value was not changed.
 *
 * @example
 * ```ts
 * const doc = parseDocument("mode: 0644\n", { version: "1.1" });
 * keepScalarForms(doc, "mode: 0644\n");
 * doc.set("name", "x");
 * doc.toString(); // "mode: 0644\nname: x\n"
 * ```
 */
export function keepScalarForms(doc: Document, source: string): void {
  const written = new WeakMap<Scalar, Written>();
  visit(doc, {
    Scalar(_, node) {
      const range = node.range;
      if (!range || node.type === "BLOCK_LITERAL") return;
      const text = source.slice(range[0], range[1]);
      if (node.type === "BLOCK_FOLDED") {
        const folded = foldedForm(text);
        if (folded) written.set(node, { value: node.value, text: "", folded });
        return;
      }
      if (text === "" || text.includes("\n")) return;
      written.set(node, { value: node.value, text });
    },
  });
  doc.schema.tags = doc.schema.tags.map((tag) => {
    const original = tag as ScalarTag;
    if (original.collection || typeof original.stringify !== "function") return tag;
    const stringify = original.stringify;
    return {
      ...tag,
      stringify(node: unknown, ...rest: never[]): string {
        const form = isScalar(node) ? written.get(node) : undefined;
        if (form && Object.is(form.value, (node as Scalar).value)) {
          if (!form.folded) return form.text;
          // Folded lines go back at the indentation the printer puts block content at.
          const indent = (rest[0] as { indent?: string } | undefined)?.indent;
          if (indent) {
            return [
              form.folded.header,
              ...form.folded.lines.map((line) => (line === "" ? "" : indent + line)),
            ].join("\n");
          }
        }
        return stringify.call(original, node as Scalar, ...rest);
      },
    } as typeof tag;
  });
}
