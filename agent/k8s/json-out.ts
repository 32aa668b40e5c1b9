// JSON in, JSON out: a manifest of JSON objects, one or several one after the other as kubectl
// reads them (JSON is YAML, a stream of them is not), is printed back as JSON, with its keys in
// their order (a JavaScript object would move `"80"` before `"a"`), its numbers as written
// (`1.0` stays `1.0`), and the input's indentation.
import { isDeepStrictEqual } from "node:util";
import { type Document, isAlias, isMap, isNode, isScalar, isSeq, type Node } from "yaml";
import { jsonPieces, type ManifestDocument, ManifestError } from "./manifest.ts";

/** A number as JSON writes it. */
const JSON_NUMBER = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?$/;

/**
 * Prints the documents of a JSON manifest as JSON, one after the other, indented as the input
 * (`text`, the whole input) was, with its final newline when it had one.
 *
 * @example
 * ```ts
 * renderJson(readManifest(text), text); // '{\n  "kind": "Pod", …\n}\n'
 * ```
 */
export function renderJson(documents: readonly ManifestDocument[], text?: string): string {
  const source = text ?? documents.map((d) => d.source).join("");
  const indent = /\n([ \t]+)\S/.exec(source)?.[1] ?? "  ";
  const end = source.endsWith("\n") ? "\n" : "";
  const out = documents.map((d) => write(d.doc, d.doc.contents, indent, "", d.source)).join("\n") +
    end;
  // Read back as kubectl reads JSON: a value printed otherwise than it is held is a lastcall bug,
  // refused here rather than printed.
  const again = jsonPieces(out)?.map((piece) => JSON.parse(piece));
  documents.forEach((d, i) => {
    if (!isDeepStrictEqual(again?.[i], d.doc.toJS({ maxAliasCount: -1 }))) {
      throw new ManifestError(
        d.index,
        1,
        "lastcall could not print this document back as JSON with the same values (please report it): nothing printed",
      );
    }
  });
  return out;
}

/** Whether a node read from `source` was written on one line. */
function oneLine(range: readonly number[] | null | undefined, source: string): boolean {
  return !!range && !source.slice(range[0], range[1]).includes("\n");
}

/** One node as JSON, `at` being the indentation of the line it starts on. */
function write(doc: Document, node: unknown, indent: string, at: string, source: string): string {
  if (isAlias(node)) return write(doc, node.resolve(doc), indent, at, source);
  const inner = at + indent;
  if (isMap(node)) {
    if (node.items.length === 0) return "{}";
    const pairs = node.items.map((p) =>
      `${inner}${JSON.stringify(String(isScalar(p.key) ? p.key.value : p.key))}: ${
        write(doc, p.value, indent, inner, source)
      }`
    );
    return `{\n${pairs.join(",\n")}\n${at}}`;
  }
  if (isSeq(node)) {
    if (node.items.length === 0) return "[]";
    // A list the author wrote on one line stays on one line.
    if (oneLine(node.range, source) && node.items.every(isScalar)) {
      return `[${node.items.map((item) => write(doc, item, indent, inner, source)).join(", ")}]`;
    }
    return `[\n${
      node.items.map((item) => inner + write(doc, item, indent, inner, source)).join(",\n")
    }\n${at}]`;
  }
  if (isScalar(node)) {
    // A number as its author wrote it, while that still says the value (inject may change it).
    const written = typeof node.source === "string" ? node.source : undefined;
    if (
      typeof node.value === "number" && written !== undefined && JSON_NUMBER.test(written) &&
      Number(written) === node.value
    ) return written;
    return JSON.stringify(node.value ?? null);
  }
  // A plain value an edit set (`map.set("port", 18080)`) is written as the node it makes.
  if (!isNode(node)) return write(doc, doc.createNode(node), indent, at, source);
  return JSON.stringify((node as Node | null)?.toJSON?.() ?? null);
}
