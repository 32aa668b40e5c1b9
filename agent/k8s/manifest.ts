// A Kubernetes manifest as a list of YAML documents, each kept with the exact text it came
// from: a document nobody changes is printed back byte for byte (comments, quoting, `---`
// markers and all), which is what makes `inject` of its own output a no-op.
import {
  type CollectionTag,
  type Document,
  isCollection,
  parseAllDocuments,
  type ScalarTag,
  type Tags,
  type ToStringOptions,
  visit,
} from "yaml";
import { isDeepStrictEqual } from "node:util";
import { keepScalarForms } from "./scalar-form.ts";

/**
 * How manifests are read: as YAML 1.1, the YAML of Kubernetes' reader (go-yaml v2), where
 * `0644` is an octal 420 and `yes` a boolean, with go-yaml's floats and no base 60
 * (goYamlScalars); `<<` merge keys honoured; at most this many alias expansions per document
 * (yaml's default): more is an alias bomb.
 */
export const MANIFEST_YAML = {
  version: "1.1",
  merge: true,
  maxAliasCount: 100,
  customTags: goYamlScalars,
} as const;

/**
 * go-yaml v2's floats (`resolve.go`): `.5`, `-1.5e3`, `1_000.5`; a plain scalar with no digit
 * before its exponent (`e1`, `.e1`, `+e5`) is a string there, where yaml's YAML 1.1 reads NaN.
 */
const GO_YAML_FLOAT =
  /^(?:\.[0-9]+(?:[eE][-+]?[0-9]+)?|(?=[-+0-9])[-+]?_*(?:\.(?:[0-9]_*)+|(?:[0-9]_*)+(?:\.[0-9_]*)?)(?:[eE]_*[-+]?_*(?:[0-9]_*)+)?)$/;

/**
 * yaml's YAML 1.1 tags made go-yaml v2's: its floats, and no base 60 (`1:20` is a string to
 * Kubernetes, 80 to YAML 1.1).
 */
function goYamlScalars(tags: Tags): Tags {
  const kept: Tags = [];
  for (const tag of tags) {
    if (typeof tag === "string") kept.push(tag);
    else if (tag.format === "TIME") continue;
    else if (!isFloat(tag)) kept.push(tag);
    else if (tag.format !== "EXP") {
      const resolve = (s: string) => parseFloat(s.replace(/_/g, ""));
      kept.push({ ...tag, test: GO_YAML_FLOAT, resolve } as ScalarTag);
    }
  }
  return kept;
}

/** Whether a tag reads plain floats (yaml's `.inf` and `.nan` are go-yaml's too). */
const isFloat = (tag: ScalarTag | CollectionTag) =>
  tag.tag === "tag:yaml.org,2002:float" && "test" in tag && !!tag.test && !tag.test.test(".inf");

/** One YAML document of a manifest. */
export interface ManifestDocument {
  /** Position in the file, from 1. */
  readonly index: number;
  /** The parsed document; editing it keeps the comments of the parts left alone. */
  readonly doc: Document.Parsed;
  /** The text this document came from: its `---` marker, comments and trailing `...` included. */
  readonly source: string;
}

/** A manifest that is not YAML: names the document and the line. */
export class ManifestError extends Error {
  override name = "ManifestError";
  /** Document position, from 1. */
  readonly document: number;
  /** Line in the whole file, from 1. */
  readonly line: number;

  constructor(document: number, line: number, reason: string, options?: ErrorOptions) {
    super(`document ${document}, line ${line}: ${reason}`, options);
    this.document = document;
    this.line = line;
  }
}

/**
 * Splits a manifest into its YAML documents; a stream of JSON objects (`kubectl apply -f` reads
 * them one after the other, YAML does not) into one document each.
 *
 * @example Two documents
 * ```ts
 * readManifest("kind: Pod\n---\nkind: Job\n").map((d) => d.doc.get("kind")); // ["Pod", "Job"]
 * readManifest('{"kind": "Pod"}\n{"kind": "Job"}\n').length; // 2
 * ```
 * @throws {ManifestError} on the first document that is not valid YAML, or whose value cannot
 * be built (an alias bomb, a merge key on something not a mapping)
 */
export function readManifest(text: string): ManifestDocument[] {
  const pieces = jsonPieces(text);
  if (!pieces || pieces.length === 1) return readDocuments(text, 0, 0);
  let lines = 0;
  return pieces.flatMap((piece, i) => {
    const read = readDocuments(piece, i, lines);
    lines += piece.split("\n").length - 1;
    return read;
  });
}

/** The documents of `text`, numbered after `before` of them, on lines after the `lines` first. */
function readDocuments(text: string, before: number, lines: number): ManifestDocument[] {
  const docs = parseAllDocuments(text, MANIFEST_YAML);
  // An empty file parses to an empty list (or an EmptyStream): nothing to do.
  if (!Array.isArray(docs)) return [];
  return docs.map((doc, i) => {
    const index = before + i + 1;
    const template = templateLine(doc, text);
    if (template !== undefined) {
      throw new ManifestError(
        index,
        lines + template,
        "an unrendered template ({{ … }}): render it first (helm template, kustomize build) and inject what it prints",
      );
    }
    const error = doc.errors[0];
    if (error) {
      const reason = error.message.split("\n")[0].replace(/ at line \d+, column \d+:?$/, "");
      throw new ManifestError(index, lines + (error.linePos?.[0].line ?? 1), reason, {
        cause: error,
      });
    }
    try {
      // Built once here, so a document that cannot be built fails as a YAML error, not later.
      doc.toJS({ maxAliasCount: MANIFEST_YAML.maxAliasCount });
    } catch (error) {
      const line = text.slice(0, doc.contents?.range?.[0] ?? doc.range[0]).split("\n").length;
      throw new ManifestError(index, lines + line, valueError(error as Error), { cause: error });
    }
    keepScalarForms(doc, text);
    // Each document owns the text from its own start (its `---`) to the next one's start; the
    // first also owns whatever precedes it, so the pieces always add up to the whole file.
    const start = i === 0 ? 0 : doc.range[0];
    const end = i + 1 < docs.length ? docs[i + 1].range[0] : text.length;
    return { index, doc, source: text.slice(start, end) };
  });
}

/**
 * The input cut after each of its top-level JSON values (an object or an array; the whitespace
 * between them goes with the value before it, what follows the last with the last), or
 * undefined when it is not JSON values alone: YAML, JSON with YAML after it, or a value left
 * open.
 *
 * @example Two objects, as `kubectl apply -f` reads them
 * ```ts
 * jsonPieces('{"kind": "Pod"}\n{"kind": "Job"}\n'); // ['{"kind": "Pod"}\n', '{"kind": "Job"}\n']
 * jsonPieces("kind: Pod\n"); // undefined
 * ```
 */
export function jsonPieces(text: string): string[] | undefined {
  const ends: number[] = [];
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === "\\") i++;
      else if (c === '"') inString = false;
    } else if (c === '"' && depth > 0) inString = true;
    else if (c === "{" || c === "[") depth++;
    else if (c === "}" || c === "]") {
      if (--depth < 0) return undefined;
      if (depth === 0) ends.push(i + 1);
    } else if (depth === 0 && !/[\s\uFEFF]/.test(c)) return undefined;
  }
  if (depth !== 0 || inString || ends.length === 0) return undefined;
  return ends.map((end, i) =>
    text.slice(i === 0 ? 0 : ends[i - 1], i + 1 === ends.length ? text.length : end)
  );
}

/** A Go template action as Helm charts write them: `{{ .Values.x }}`, `{{- include "a" . }}`, `{{ end }}`. */
const TEMPLATE_ACTION =
  /\{\{-?\s*(?:[.$]|\/\*|(?:if|else|end|range|with|include|template|define|block|toYaml|tpl|printf|quote|default|required|nindent|indent|lookup)\b)[^}]*\}\}/;

/**
 * The line of the first template action (`{{ … }}`) the document holds as YAML syntax, or
 * undefined. Go templates read as YAML flow mappings (`{{ .Values.name }}` is a mapping whose
 * key is a mapping) or, in a plain scalar, as text; inside quotes or a block scalar they are a
 * string's content (an alert rule's `{{ $labels.pod }}`), which is left alone. A document that
 * does not parse is checked line by line: a `{{` outside comments and quotes names the line.
 */
function templateLine(doc: Document.Parsed, text: string): number | undefined {
  const lineOf = (offset: number) => text.slice(0, offset).split("\n").length;
  let found: number | undefined;
  visit(doc, {
    Map(_, map) {
      if (map.flow && map.items.some((p) => isCollection(p.key))) {
        found = lineOf(map.range?.[0] ?? 0);
        return visit.BREAK;
      }
    },
    Scalar(_, scalar) {
      if (
        scalar.type === "PLAIN" && typeof scalar.source === "string" &&
        TEMPLATE_ACTION.test(scalar.source)
      ) {
        found = lineOf(scalar.range?.[0] ?? 0);
        return visit.BREAK;
      }
    },
  });
  if (found !== undefined || doc.errors.length === 0) return found;
  const start = lineOf(doc.range[0]);
  const lines = text.slice(doc.range[0], doc.range[2]).split("\n");
  const at = lines.findIndex((line) =>
    TEMPLATE_ACTION.test(line.replace(/(^|\s)#.*$/, "").replace(/"[^"]*"|'[^']*'/g, ""))
  );
  return at < 0 ? undefined : start + at;
}

/** Says why a document's value could not be built, in the user's terms. */
function valueError(error: Error): string {
  if (/alias count/i.test(error.message)) {
    return `more than ${MANIFEST_YAML.maxAliasCount} alias expansions (an alias bomb?): refused`;
  }
  return error.message.split("\n")[0];
}

/**
 * Prints a manifest back: documents not in `changed` exactly as read, the others serialised
 * in the style their source used for block sequences.
 *
 * @example Unchanged manifests come back identical
 * ```ts
 * renderManifest(readManifest(text), new Set()) === text; // true
 * ```
 */
export function renderManifest(
  documents: readonly ManifestDocument[],
  changed: ReadonlySet<ManifestDocument>,
): string {
  return documents.map((d) => (changed.has(d) ? printed(d) : d.source)).join("");
}

/**
 * A changed document as text, checked to read back to the values it holds: printing keeps
 * the author's forms (scalar-form.ts), and a form that would read back otherwise is refused
 * here rather than printed.
 * @throws {ManifestError} when the text would not read back the same (a lastcall bug)
 */
function printed(d: ManifestDocument): string {
  const text = d.doc.toString(styleOf(d.source));
  const again = parseAllDocuments(text, MANIFEST_YAML);
  const same = Array.isArray(again) && again.length === 1 && again[0].errors.length === 0 &&
    isDeepStrictEqual(again[0].toJS({ maxAliasCount: -1 }), d.doc.toJS({ maxAliasCount: -1 }));
  if (!same) {
    throw new ManifestError(
      d.index,
      1,
      "lastcall could not print this document back with the same values (please report it): nothing printed",
    );
  }
  return text;
}

/**
 * Serialisation options that follow a document's source: `kubectl` writes `- item` at the
 * indentation of its key, many hand-written files indent it by two; long strings are never
 * folded, flow collections keep the usual `[a, b]` spacing.
 */
export function styleOf(source: string): ToStringOptions {
  let flush = 0;
  let indented = 0;
  const lines = source.split("\n");
  for (let i = 0; i + 1 < lines.length; i++) {
    const key = /^(\s*)(- )?[^\s#-][^#]*:\s*$/.exec(lines[i]);
    const item = /^(\s*)- /.exec(lines[i + 1]);
    if (!key || !item) continue;
    // The key's own column: past the `- ` when it opens a mapping inside a list.
    const keyIndent = key[1].length + (key[2] ? 2 : 0);
    if (item[1].length === keyIndent) flush++;
    else if (item[1].length > keyIndent) indented++;
  }
  return { indentSeq: !(flush > indented), lineWidth: 0, flowCollectionPadding: false };
}
