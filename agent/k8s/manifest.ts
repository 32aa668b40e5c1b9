// A Kubernetes manifest as a list of YAML documents, each kept with the exact text it came
// from: a document nobody changes is printed back byte for byte (comments, quoting, `---`
// markers and all), which is what makes `inject` of its own output a no-op.
import { type Document, parseAllDocuments, type ToStringOptions } from "yaml";

/**
 * How manifests are read: `<<` merge keys honoured (as kubectl's go-yaml does), and at most
 * this many alias expansions per document (yaml's default): more is an alias bomb.
 */
export const MANIFEST_YAML = { merge: true, maxAliasCount: 100 } as const;

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
 * Splits a manifest into its YAML documents.
 *
 * @example Two documents
 * ```ts
 * readManifest("kind: Pod\n---\nkind: Job\n").map((d) => d.doc.get("kind")); // ["Pod", "Job"]
 * ```
 * @throws {ManifestError} on the first document that is not valid YAML, or whose value cannot
 * be built (an alias bomb, a merge key on something not a mapping)
 */
export function readManifest(text: string): ManifestDocument[] {
  const docs = parseAllDocuments(text, MANIFEST_YAML);
  // An empty file parses to an empty list (or an EmptyStream): nothing to do.
  if (!Array.isArray(docs)) return [];
  return docs.map((doc, i) => {
    const error = doc.errors[0];
    if (error) {
      const reason = error.message.split("\n")[0].replace(/ at line \d+, column \d+:?$/, "");
      throw new ManifestError(i + 1, error.linePos?.[0].line ?? 1, reason, { cause: error });
    }
    try {
      // Built once here, so a document that cannot be built fails as a YAML error, not later.
      doc.toJS({ maxAliasCount: MANIFEST_YAML.maxAliasCount });
    } catch (error) {
      const line = text.slice(0, doc.contents?.range?.[0] ?? doc.range[0]).split("\n").length;
      throw new ManifestError(i + 1, line, valueError(error as Error), { cause: error });
    }
    // Each document owns the text from its own start (its `---`) to the next one's start; the
    // first also owns whatever precedes it, so the pieces always add up to the whole file.
    const start = i === 0 ? 0 : doc.range[0];
    const end = i + 1 < docs.length ? docs[i + 1].range[0] : text.length;
    return { index: i + 1, doc, source: text.slice(start, end) };
  });
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
export function renderManifest(documents: readonly ManifestDocument[], changed: ReadonlySet<ManifestDocument>): string {
  return documents.map((d) => (changed.has(d) ? d.doc.toString(styleOf(d.source)) : d.source)).join("");
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
