// Reads Prometheus exposition text the way a test asserts on it: one value per sample.

/**
 * Every sample of an exposition text: `name{labels}` to its value (comments skipped).
 *
 * @example
 * ```ts
 * parseSamples('# HELP x\nx{kind="reload"} 1\n').get('x{kind="reload"}'); // 1
 * ```
 */
export function parseSamples(text: string): Map<string, number> {
  const map = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const at = line.lastIndexOf(" ");
    map.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return map;
}
