// LDS from a file: lastcall watches the user's file and gives Envoy a rewritten copy, renamed into
// place.
import { randomBytes } from "node:crypto";
import { readFile, rename, rm, writeFile } from "node:fs/promises";
import YAML from "yaml";
import type { EventLog } from "../lib/log.ts";
import { watchFiles } from "../lib/watch.ts";
import type { EncodedFilters } from "./listener.ts";
import { insertIntoResponse, type JsonListenerRewrite } from "./listener-json.ts";
import { rewriteResponse } from "./messages.ts";
import type { XdsFile, XdsPlan } from "./redirect.ts";
import type { XdsStats } from "./stats.ts";

/** What one file relay needs. */
export interface FileRelayContext {
  filters: XdsPlan["filters"];
  encoded: EncodedFilters;
  stats: XdsStats;
  log: EventLog;
  onListeners(listeners: JsonListenerRewrite[]): void;
}

/** The content Envoy gets for the user's file content, and the listeners that got the filter. */
export function rewriteFile(
  content: Uint8Array,
  format: XdsFile["format"],
  context: Pick<FileRelayContext, "filters" | "encoded">,
): {
  content: Uint8Array;
  listeners: JsonListenerRewrite[];
} {
  try {
    if (format === "pb") {
      const rewrite = rewriteResponse(content, "sotw", context.encoded);
      return { content: rewrite.bytes, listeners: rewrite.listeners };
    }
    const parsed = YAML.parse(new TextDecoder().decode(content)) as unknown;
    const listeners = insertIntoResponse(parsed, context.filters);
    if (!listeners.some((l) => l.http + l.tcp > 0 || l.marked)) return { content, listeners };
    return { content: new TextEncoder().encode(JSON.stringify(parsed, null, 1)), listeners };
  } catch {
    return { content, listeners: [] };
  }
}

/**
 * Writes the first copy, then follows the user's file until the returned function is called.
 *
 * @example
 * ```ts
 * const stop = await relayFile(plan.files[0], context);
 * ```
 */
export async function relayFile(file: XdsFile, context: FileRelayContext): Promise<() => void> {
  let last: Uint8Array | undefined;
  const publish = async () => {
    let content: Uint8Array;
    try {
      content = await readFile(file.source);
    } catch (error) {
      context.log("xds_file_unreadable", { path: file.source, error: (error as Error).message });
      return;
    }
    const rewrite = rewriteFile(content, file.format, context);
    if (last && Buffer.compare(last, rewrite.content) === 0) return;
    last = rewrite.content;
    const temporary = `${file.copy}.${randomBytes(4).toString("hex")}.tmp`;
    await writeFile(temporary, rewrite.content, { mode: 0o600 });
    await rename(temporary, file.copy).catch(async (error) => {
      await rm(temporary, { force: true });
      throw error;
    });
    context.stats.filesWritten++;
    context.stats.listenersRewritten += rewrite.listeners.filter((l) => l.http + l.tcp > 0).length;
    context.log("xds_listeners", {
      service: "file",
      path: file.source,
      listeners: rewrite.listeners.map((l) => l.name),
      filtered: rewrite.listeners.filter((l) => l.http + l.tcp > 0).map((l) => l.name),
      counted: rewrite.listeners.map((l) => ({
        name: l.name,
        direction: l.direction,
        counted: l.counted,
        delivery: l.delivery,
      })),
    });
    context.onListeners(rewrite.listeners);
  };
  let queue = publish();
  await queue;
  return await watchFiles([file.source], () => {
    queue = queue.then(publish).catch((error: Error) =>
      context.log("xds_file_write_failed", { path: file.copy, error: error.message })
    );
  });
}
