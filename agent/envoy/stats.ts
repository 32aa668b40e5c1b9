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
  if (!parsed || !Array.isArray(parsed.stats)) {
    throw new SyntaxError(`Not Envoy stats JSON: ${text.slice(0, 80)}`);
  }
  return parsed.stats.flatMap((s) =>
    typeof s.name === "string" && typeof s.value === "number"
      ? [{ name: s.name, value: s.value }]
      : []
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
export function activeConnections(
  stats: Stat[],
  excludeAddresses: readonly string[] = [],
): number | undefined {
  let total: number | undefined;
  for (const { name, value } of stats) {
    const match = /^listener\.(.+)\.downstream_cx_active$/.exec(name);
    if (!match) continue;
    const listener = match[1];
    // Envoy 1.40 also keeps per-thread copies: `<listener>.worker_<n>` and `admin.main_thread`.
    if (/\.(worker_\d+|main_thread)$/.test(listener)) continue;
    if (listener.startsWith("envoy_internal_") || listener === "admin") continue;
    if (
      excludeAddresses.some((address) => listener === address || listener.startsWith(`${address}.`))
    ) continue;
    total = (total ?? 0) + value;
  }
  return total;
}

/**
 * The stats {@linkcode envoyBuffers} reads: HTTP/2 response bytes waiting for a client's window
 * (`http2.pending_send_bytes`: every downstream HTTP/2 codec), bytes in the connection write
 * buffers of each connection manager and TCP proxy, open HTTP/2 and HTTP/3 connections, and the
 * connections Envoy closed when a delayed close ran out (their peer had not closed).
 */
export const BUFFER_STATS = "^http2\\.pending_send_bytes$|" +
  "^(http|tcp)\\..+\\.downstream_cx_tx_bytes_buffered$|" +
  "^http\\..+\\.downstream_cx_(http[23]_active|delayed_close_timeout)$";

/** What Envoy itself still holds for its clients, from its stats. */
export interface EnvoyBuffers {
  /** Response bytes in Envoy's own buffers: HTTP/2 codecs waiting for a window, write buffers. */
  bytes: number;
  /**
   * Open HTTP/2 connections: what a client's TCP took but its app has not read yet (up to its
   * window) is lost if the client drops it as the connection closes (the client's WINDOW_UPDATEs
   * then meet a closed socket: a reset).
   */
  http2Connections: number;
  /** Of those, the ones of the given connection managers (all when none were given). */
  http2Of: number;
  /** Open HTTP/3 connections: what QUIC still has to send or resend is not in any stat. */
  http3Connections: number;
  /** Connections closed by a delayed close's timeout, since Envoy started (a counter). */
  delayedCloseTimeouts: number;
}

/** The connection manager's stat prefix in `http.<prefix>.<name>`. */
const prefixOf = (name: string, stat: string) => name.slice("http.".length, -stat.length - 1);

/**
 * Sums what Envoy holds for its clients (see {@linkcode BUFFER_STATS}); Envoy's admin connection
 * manager (the answer being written) is left out. `http2Of` counts the HTTP/2 connections of the
 * connection managers with the given stat prefixes (all when undefined).
 *
 * @example
 * ```ts
 * envoyBuffers([{ name: "http2.pending_send_bytes", value: 18_000 }]).bytes; // 18000
 * ```
 */
export function envoyBuffers(stats: Stat[], prefixes?: ReadonlySet<string>): EnvoyBuffers {
  const held = { bytes: 0, http2Connections: 0, http2Of: 0, http3Connections: 0 };
  let delayedCloseTimeouts = 0;
  const h2 = "downstream_cx_http2_active";
  for (const { name, value } of stats) {
    if (name.startsWith("http.admin.")) continue;
    if (name === "http2.pending_send_bytes" || name.endsWith(".downstream_cx_tx_bytes_buffered")) {
      held.bytes += value;
    } else if (name.endsWith(`.${h2}`)) {
      held.http2Connections += value;
      if (!prefixes || prefixes.has(prefixOf(name, h2))) held.http2Of += value;
    } else if (name.endsWith(".downstream_cx_http3_active")) held.http3Connections += value;
    else if (name.endsWith(".downstream_cx_delayed_close_timeout")) delayedCloseTimeouts += value;
  }
  return { ...held, delayedCloseTimeouts };
}
