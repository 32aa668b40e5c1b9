// The code blocks of README.md and docs/*.md as a reader pastes them: YAML blocks recognised and
// completed, and lastcall command lines.
import { readdirSync, readFileSync } from "node:fs";
import { basename, join } from "node:path";
import YAML from "yaml";
import { root } from "./paths.ts";

/** One fenced code block of a doc. */
export interface DocBlock {
  /** The doc, relative to the repository (`docs/operations.md`). */
  file: string;
  /** The line of the opening fence, 1-based. */
  line: number;
  /** The fence's language (`yaml`, `sh`, …; "" when none). */
  lang: string;
  /** The block's text, its indentation (inside a list item) removed. */
  text: string;
}

/** README.md and every docs/*.md, relative to the repository. */
export function docFiles(): string[] {
  return [
    "README.md",
    ...readdirSync(join(root, "docs")).filter((f) => f.endsWith(".md")).sort().map((f) =>
      `docs/${f}`
    ),
  ];
}

/** Every fenced block of `files` (default: {@linkcode docFiles}), in order. */
export function docBlocks(files = docFiles()): DocBlock[] {
  const blocks: DocBlock[] = [];
  for (const file of files) {
    const lines = readFileSync(join(root, file), "utf8").split("\n");
    for (let i = 0; i < lines.length; i++) {
      const open = /^(\s*)(`{3,})([\w-]*)\s*$/.exec(lines[i]);
      if (!open) continue;
      const [, indent, fence, lang] = open;
      const body: string[] = [];
      let j = i + 1;
      for (; j < lines.length && !new RegExp(`^\\s*${fence}\\s*$`).test(lines[j]); j++) {
        body.push(lines[j].startsWith(indent) ? lines[j].slice(indent.length) : lines[j]);
      }
      if (j === lines.length) {
        throw new Error(`${file}:${i + 1}: a code block that is never closed`);
      }
      blocks.push({ file, line: i + 1, lang, text: body.join("\n") });
      i = j;
    }
  }
  return blocks;
}

/** The ```yaml blocks of the docs. */
export function yamlBlocks(): DocBlock[] {
  return docBlocks().filter((b) => b.lang === "yaml" || b.lang === "yml");
}

/** Where a block is, for messages: `docs/operations.md:90`. */
export const where = (block: DocBlock) => `${block.file}:${block.line}`;

/** A block's name in expectation tables: its file and first line, comments and blanks left out. */
export function blockKey(block: DocBlock): string {
  const first =
    block.text.split("\n").map((l) => l.replace(/\s+#.*$/, "").trim()).find((l) =>
      l && !l.startsWith("#")
    ) ?? "";
  return `${block.file}: ${first}`;
}

type Obj = Record<string, unknown>;

/** What a YAML block is. */
export type YamlShape =
  | { kind: "kubernetes"; objects: Obj[] }
  | { kind: "pod-spec"; spec: Obj }
  | { kind: "container"; container: Obj }
  | { kind: "envoy-bootstrap"; bootstrap: Obj }
  | { kind: "envoy-http-filters"; filters: Obj[] }
  | { kind: "envoy-network-filters"; filters: Obj[] };

/** The documents of a YAML block, parsed as lastcall parses manifests and configs (merge keys on). */
export function parseYamlBlock(block: DocBlock): unknown[] {
  const documents = YAML.parseAllDocuments(block.text, { merge: true });
  const errors = (Array.isArray(documents) ? documents : [documents]).flatMap((d) => d.errors);
  if (errors.length) throw new Error(`${where(block)}: not YAML: ${errors[0].message}`);
  return (Array.isArray(documents) ? documents : [documents]).map((d) => d.toJS()).filter((d) =>
    d !== null
  );
}

const isObject = (value: unknown): value is Obj =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/**
 * Recognises a YAML block; throws naming the block when it is none of the shapes, or when a
 * Kubernetes object lacks `apiVersion` or `kind`.
 */
export function yamlShape(block: DocBlock): YamlShape {
  const documents = parseYamlBlock(block);
  if (documents.length === 0) throw new Error(`${where(block)}: an empty YAML block`);
  const objects = documents.filter(isObject);
  if (objects.length !== documents.length) {
    throw new Error(`${where(block)}: a YAML document that is not a mapping`);
  }
  if (objects.some((o) => "apiVersion" in o || "kind" in o)) {
    for (const o of objects) {
      if (typeof o.apiVersion !== "string" || typeof o.kind !== "string") {
        throw new Error(
          `${where(block)}: a Kubernetes object needs apiVersion and kind (has ${
            Object.keys(o).join(", ")
          })`,
        );
      }
    }
    return { kind: "kubernetes", objects };
  }
  if (objects.length > 1) {
    throw new Error(`${where(block)}: several documents that are not Kubernetes objects`);
  }
  const [o] = objects;
  if ("containers" in o || "initContainers" in o) return { kind: "pod-spec", spec: o };
  if ("command" in o || "args" in o || "image" in o) return { kind: "container", container: o };
  if ("static_resources" in o || "dynamic_resources" in o || "admin" in o) {
    return { kind: "envoy-bootstrap", bootstrap: o };
  }
  if (Array.isArray(o.http_filters)) {
    return { kind: "envoy-http-filters", filters: o.http_filters as Obj[] };
  }
  if (Array.isArray(o.filters)) {
    return { kind: "envoy-network-filters", filters: o.filters as Obj[] };
  }
  throw new Error(
    `${
      where(block)
    }: a YAML block that is none of: Kubernetes objects, a pod spec, a container, an Envoy bootstrap or filter list (keys ${
      Object.keys(o).join(", ")
    })`,
  );
}

/** A Pod's name for a block: `docs-operations-90`. */
function podName(block: DocBlock): string {
  return `docs-${
    basename(block.file, ".md").toLowerCase().replace(/[^a-z0-9]+/g, "-")
  }-${block.line}`;
}

/** A pod spec block as the Pod it would be part of. */
export function podOf(block: DocBlock, spec: Obj): Obj {
  return { apiVersion: "v1", kind: "Pod", metadata: { name: podName(block) }, spec };
}

/** A container block as the one container of a Pod (`app`, image `app:1` unless it says). */
export function containerPodOf(block: DocBlock, container: Obj): Obj {
  return podOf(block, { containers: [{ name: "app", image: "app:1", ...container }] });
}

/** A Kubernetes object of the docs; `whole` false when a fragment was completed into a Pod here. */
export interface DocsObject {
  block: DocBlock;
  object: Obj;
  whole: boolean;
}

/**
 * Every Kubernetes object of the docs' YAML blocks: the objects as written, and the pod specs and
 * containers completed into Pods. The hook for the API server's validation (the real-kubelet
 * work, test/support/kube-api.ts): each must be accepted as it is.
 *
 * @example
 * ```ts
 * for (const { block, object } of docsKubernetesObjects()) await validate(object); // names where(block) on failure
 * ```
 */
export function docsKubernetesObjects(): DocsObject[] {
  return yamlBlocks().flatMap((block): DocsObject[] => {
    const shape = yamlShape(block);
    if (shape.kind === "kubernetes") {
      return shape.objects.map((object) => ({ block, object, whole: true }));
    }
    if (shape.kind === "pod-spec") {
      return [{ block, object: podOf(block, shape.spec), whole: false }];
    }
    if (shape.kind === "container") {
      return [{ block, object: containerPodOf(block, shape.container), whole: false }];
    }
    return [];
  });
}

/** One lastcall command line of a shell block. */
export interface CommandLine {
  block: DocBlock;
  /** The line in the doc. */
  line: number;
  /** The arguments after `lastcall` (or after `envoy-gateway`, as lastcall reads them then). */
  argv: string[];
  /** Where `>` sends the output, if anywhere. */
  stdout?: string;
  /** Where `<` reads the input from, if anywhere. */
  stdin?: string;
}

/** Splits a shell line into words and operators (quotes kept together, `#` comments dropped). */
export function shellWords(line: string): string[] {
  const words: string[] = [];
  let word = "";
  let quote: string | undefined;
  let started = false;
  const push = () => {
    if (started) words.push(word);
    word = "";
    started = false;
  };
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (quote) {
      if (c === quote) quote = undefined;
      else word += c;
      continue;
    }
    if (c === "'" || c === '"') {
      quote = c;
      started = true;
    } else if (/\s/.test(c)) {
      push();
    } else if (c === "#" && !started) {
      break;
    } else if ("|;&<>".includes(c)) {
      push();
      const two = line.slice(i, i + 2);
      words.push(two === "&&" || two === "||" || two === ">>" ? (i++, two) : c);
    } else {
      word += c;
      started = true;
    }
  }
  if (quote) throw new Error(`unclosed ${quote} in: ${line}`);
  push();
  return words;
}

const OPERATORS = new Set(["|", ";", "&", "&&", "||"]);

/** The lastcall command lines of the ```sh, ```shell, ```bash and ```console blocks (`$ ` prompts in console). */
export function lastcallCommandLines(): CommandLine[] {
  const found: CommandLine[] = [];
  for (
    const block of docBlocks().filter((b) => ["sh", "shell", "bash", "console"].includes(b.lang))
  ) {
    block.text.split("\n").forEach((raw, index) => {
      let text = raw;
      if (block.lang === "console") {
        if (!text.startsWith("$ ")) return;
        text = text.slice(2);
      }
      const words = shellWords(text).map((w) => (/^\[.*\]$/.test(w) ? w.slice(1, -1) : w));
      const at = words.findIndex((w) =>
        w === "lastcall" || w.endsWith("/lastcall") || w === "envoy-gateway"
      );
      if (at < 0) return;
      const rest = words.slice(at + 1);
      const end = rest.findIndex((w) => OPERATORS.has(w));
      const command = end < 0 ? rest : rest.slice(0, end);
      const argv: string[] = [];
      let stdout: string | undefined;
      let stdin: string | undefined;
      for (let i = 0; i < command.length; i++) {
        if (command[i] === ">" || command[i] === ">>") stdout = command[++i];
        else if (command[i] === "<") stdin = command[++i];
        else argv.push(command[i]);
      }
      if (words[at] === "envoy-gateway" && argv[0] === "envoy") argv[0] = "gateway";
      found.push({ block, line: block.line + 1 + index, argv, stdout, stdin });
    });
  }
  return found;
}
