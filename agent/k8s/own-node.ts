// Editing through YAML anchors: before `inject` edits a value, an alias or merged key is made the
// mapping's own; the anchored original is left alone.
import {
  type Document,
  isAlias,
  isMap,
  isScalar,
  isSeq,
  type Node,
  type YAMLMap,
  type YAMLSeq,
} from "yaml";

/** What a mapping means with its merge keys applied and its aliases resolved. */
export function valueOf(doc: Document, node: unknown): unknown {
  return isMap(node) || isSeq(node) || isScalar(node) || isAlias(node)
    ? (node as Node).toJS(doc)
    : node;
}

/** A plain copy of a resolved value, as a node of `doc` (no anchors, no aliases). */
function copyOf(doc: Document, value: unknown): Node {
  return doc.createNode(value, { aliasDuplicateObjects: false }) as Node;
}

/**
 * The node of `map[key]`, made `map`'s own: an alias becomes a copy of what it points to, a
 * key only merged in (`<<: *base`) is added as an explicit key with the merged value.
 * Undefined when the key is not there at all.
 *
 * @example
 * ```ts
 * // containers:
 * //   - <<: *app
 * //     name: web
 * const command = ownValue(doc, container, "command"); // now `command: [...]` in the container
 * ```
 */
export function ownValue(doc: Document, map: YAMLMap, key: string): Node | undefined {
  const pair = map.items.find((p) => (isScalar(p.key) ? p.key.value : p.key) === key);
  if (pair) {
    if (isAlias(pair.value)) pair.value = copyOf(doc, pair.value.toJS(doc));
    return (pair.value ?? undefined) as Node | undefined;
  }
  const merged = valueOf(doc, map) as Record<string, unknown> | null;
  if (!merged || typeof merged !== "object" || !Object.hasOwn(merged, key)) return undefined;
  const node = copyOf(doc, merged[key]);
  map.items.push(doc.createPair(key, node));
  return node;
}

/** Item `index` of `seq`, made its own: an alias becomes a copy of what it points to. */
export function ownItem(doc: Document, seq: YAMLSeq, index: number): unknown {
  const item = seq.items[index];
  if (isAlias(item)) seq.items[index] = copyOf(doc, item.toJS(doc));
  return seq.items[index];
}

/**
 * Follows `path` from `from` (the document's root by default) through mappings, making each
 * step the parent's own (see {@linkcode ownValue}); undefined when a step is missing or not a
 * mapping.
 *
 * @example
 * ```ts
 * const spec = ownIn(doc, ["spec", "template", "spec"]);
 * ```
 */
export function ownIn(
  doc: Document,
  path: readonly string[],
  from: unknown = doc.contents,
): Node | undefined {
  let at: unknown = from;
  for (const key of path) {
    if (!isMap(at)) return undefined;
    at = ownValue(doc, at, key);
  }
  return at as Node | undefined;
}
