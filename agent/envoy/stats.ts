// Pure parsers of Envoy admin output, tested on output captured from Envoy 1.40.

/**
 * The filter's in-flight gauges, as a regular expression on the name after `wasmcustom.`: the
 * HTTP and the TCP variant's, each with one name per parity of the restart epoch
 * (docs/filter-protocol.md, "Counting").
 */
export const GAUGE_NAMES = "lastcall_inflight(_tcp)?(_odd)?";

const GAUGE = new RegExp(`^wasmcustom\\.${GAUGE_NAMES}$`);

/** Whether a stat is one of the filter's in-flight gauges. */
export function isInflightGauge(name: string): boolean {
  return GAUGE.test(name);
}

/** One stat of `/stats?format=json`. */
export interface Stat {
  name: string;
  value: number;
}

/**
 * Parses `/stats?format=json` into counters and gauges (histograms are skipped).
 *
 * @example
 * ```ts
 * parseStatsJson('{"stats":[{"name":"a","value":1}]}'); // [{ name: "a", value: 1 }]
 * ```
 * @throws {SyntaxError} when the text is not Envoy's stats JSON
 */
export function parseStatsJson(text: string): Stat[] {
  const parsed = JSON.parse(text) as { stats?: Array<{ name?: unknown; value?: unknown }> };
  if (!parsed || !Array.isArray(parsed.stats)) throw new SyntaxError(`Not Envoy stats JSON: ${text.slice(0, 80)}`);
  return parsed.stats.flatMap((s) =>
    typeof s.name === "string" && typeof s.value === "number" ? [{ name: s.name, value: s.value }] : []
  );
}

/**
 * Sums `http.<prefix>.downstream_rq_active` over the given connection managers' stat prefixes
 * (all of them when `prefixes` is undefined). Envoy's admin connection manager is excluded.
 */
export function activeRequests(stats: Stat[], prefixes?: ReadonlySet<string>): number {
  let total = 0;
  for (const { name, value } of stats) {
    const match = /^http\.(.+)\.downstream_rq_active$/.exec(name);
    if (!match || match[1] === "admin") continue;
    if (prefixes && !prefixes.has(match[1])) continue;
    total += value;
  }
  return total;
}

/**
 * Sums `listener.<address>.downstream_cx_active` with Istio's exclusions (EXIT_ON_ZERO_ACTIVE_
 * CONNECTIONS): per-worker copies, Envoy-internal listeners, the admin listener, and the
 * agent's own status listener. Returns undefined when no such stat exists: Istio then exits at once.
 */
export function activeConnections(stats: Stat[], excludeAddresses: readonly string[] = []): number | undefined {
  let total: number | undefined;
  for (const { name, value } of stats) {
    const match = /^listener\.(.+)\.downstream_cx_active$/.exec(name);
    if (!match) continue;
    const listener = match[1];
    // Envoy 1.40 also keeps per-thread copies: `<listener>.worker_<n>` and `admin.main_thread`.
    if (/\.(worker_\d+|main_thread)$/.test(listener)) continue;
    if (listener.startsWith("envoy_internal_") || listener === "admin") continue;
    if (excludeAddresses.some((address) => listener === address || listener.startsWith(`${address}.`))) continue;
    total = (total ?? 0) + value;
  }
  return total;
}
