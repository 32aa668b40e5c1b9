// The three counts of what is in flight, each read where it lives: Envoy's own request gauge and
// the filter's gauges (one admin /stats call, so both are read at the same instant), and the
// agent's count (`/v1/state`) once reports composed after the moment of interest have arrived.
import { waitFor } from "./envoy.ts";
import { agentState } from "./serving.ts";

/** What one Envoy's admin says is in flight. */
export interface EnvoyCounts {
  /** `http.<prefix>.downstream_rq_active`: Envoy's own count of the listener's active requests. */
  rqActive: number;
  /** `wasmcustom.lastcall_inflight` (even epochs; in a hot-restart child, its parent's, imported). */
  gauge: number;
  /** `wasmcustom.lastcall_inflight_odd` (odd epochs), when the process has it. */
  gaugeOdd?: number;
  /** `downstream_cx_active` of each worker of the listener, by worker index. */
  workers: number[];
}

/**
 * Reads the counts from one admin in one `/stats` call.
 *
 * @example
 * ```ts
 * const { rqActive, gauge } = await envoyCounts(lc.adminUrl()); // { rqActive: 3, gauge: 3, … }
 * ```
 * @throws {Error} naming the admin and the stat when Envoy does not show one of the counts
 */
export async function envoyCounts(adminUrl: string, statPrefix = "ingress"): Promise<EnvoyCounts> {
  const filter =
    `^(http\\.${statPrefix}\\.downstream_rq_active|wasmcustom\\.lastcall_inflight(_odd)?|listener\\..*\\.worker_\\d+\\.downstream_cx_active)$`;
  const response = await fetch(
    `${adminUrl}/stats?format=json&filter=${encodeURIComponent(filter)}`,
  );
  if (!response.ok) {
    throw new Error(`Envoy admin ${adminUrl} answered /stats with ${response.status}`);
  }
  const body = await response.json() as { stats: Array<{ name: string; value?: number }> };
  const value = (name: string) => body.stats.find((s) => s.name === name)?.value;
  const rqActive = value(`http.${statPrefix}.downstream_rq_active`);
  const gauge = value("wasmcustom.lastcall_inflight");
  if (rqActive === undefined) {
    throw new Error(`Envoy admin ${adminUrl} shows no http.${statPrefix}.downstream_rq_active`);
  }
  const workers: number[] = [];
  for (const s of body.stats) {
    const worker = /\.worker_(\d+)\.downstream_cx_active$/.exec(s.name);
    if (worker) workers[Number(worker[1])] = s.value ?? 0;
  }
  const gaugeOdd = value("wasmcustom.lastcall_inflight_odd");
  return { rqActive, gauge: gauge ?? 0, ...(gaugeOdd === undefined ? {} : { gaugeOdd }), workers };
}

/** `lastcall_filter_reports_total` from the status server's `/metrics`: reports accepted so far. */
export async function reportsAccepted(status: string): Promise<number> {
  const text = await (await fetch(`${status}/metrics`)).text();
  const match = /^lastcall_filter_reports_total (\d+)$/m.exec(text);
  if (!match) throw new Error(`No lastcall_filter_reports_total in ${status}/metrics`);
  return Number(match[1]);
}

/**
 * The agent's count (`/v1/state` `inflight`: the latest report of each process, summed) once
 * `reports` more filter reports have been accepted after the call. Outside a drain each filter
 * VM (every worker's, and the main thread's) sends one heartbeat per period: with `reports` =
 * VMs + 1, a period has passed and every VM's latest heartbeat was composed after the call.
 * During a drain a VM also sends its holders when asked and, at zero, a probe answer per zero
 * hint, so there no count of reports proves that a period has passed.
 *
 * @example
 * ```ts
 * expect(await agentCountAfterReports(status, 4)).toBe(12); // 2 workers and the main thread
 * ```
 */
export async function agentCountAfterReports(status: string, reports: number): Promise<number> {
  const base = await reportsAccepted(status);
  await waitFor(
    async () => ((await reportsAccepted(status)) >= base + reports ? true : undefined),
    {
      what: `${reports} more filter reports (from ${base})`,
      intervalMs: 50,
    },
  );
  return (await agentState(status)).inflight;
}
