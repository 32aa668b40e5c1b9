// The kubelet's PLEG relists over a stretch of a run, from its own metrics, and the host's CPU.
import { readFileSync } from "node:fs";
import { NODE } from "../../test/support/kube.ts";

/** Running totals at one moment: the kubelet's relist histograms and the host's CPU ticks. */
export interface RelistReading {
  intervalSum: number;
  intervalCount: number;
  durationSum: number;
  durationCount: number;
  cpuBusy: number;
  cpuTotal: number;
}

/** What the kubelet's relists took between two readings. */
export interface RelistStretch {
  /** Relists in the stretch. */
  relists: number;
  /** Mean start → next start (ms): the 1 s period after the last relist ended, plus its length. */
  interval_mean_ms: number;
  /** Mean length of one relist (ms). */
  duration_mean_ms: number;
  /** Share of the host's CPU time that was busy (0–1). */
  host_cpu_busy: number;
}

/** Sum and count of a histogram in Prometheus text (NaN when absent). */
function histogram(text: string, name: string): { sum: number; count: number } {
  const value = (suffix: string) => {
    const line = text.split("\n").find((l) => l.startsWith(`${name}_${suffix} `));
    return line ? Number(line.split(" ")[1]) : Number.NaN;
  };
  return { sum: value("sum"), count: value("count") };
}

/** Busy and total CPU ticks of the host, from /proc/stat's first line. */
function cpuTicks(): { busy: number; total: number } {
  const fields = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1)
    .map(Number);
  const total = fields.reduce((a, b) => a + b, 0);
  const idle = (fields[3] ?? 0) + (fields[4] ?? 0);
  return { busy: total - idle, total };
}

/**
 * Reads the relist histograms from the node's kubelet (through the API server's node proxy).
 *
 * @example
 * const before = await relistReading(cluster.kubectl);
 */
export async function relistReading(
  kubectl: (args: string[]) => Promise<string>,
): Promise<RelistReading> {
  const text = await kubectl(["get", "--raw", `/api/v1/nodes/${NODE}/proxy/metrics`]);
  const interval = histogram(text, "kubelet_pleg_relist_interval_seconds");
  const duration = histogram(text, "kubelet_pleg_relist_duration_seconds");
  const cpu = cpuTicks();
  return {
    intervalSum: interval.sum,
    intervalCount: interval.count,
    durationSum: duration.sum,
    durationCount: duration.count,
    cpuBusy: cpu.busy,
    cpuTotal: cpu.total,
  };
}

/**
 * The relists between two readings.
 *
 * @example
 * const stretch = relistStretch(before, await relistReading(cluster.kubectl));
 */
export function relistStretch(from: RelistReading, to: RelistReading): RelistStretch {
  const relists = to.intervalCount - from.intervalCount;
  const ms = (sum: number, count: number) => Math.round((sum / count) * 1e4) / 10;
  return {
    relists,
    interval_mean_ms: ms(to.intervalSum - from.intervalSum, relists),
    duration_mean_ms: ms(to.durationSum - from.durationSum, to.durationCount - from.durationCount),
    host_cpu_busy:
      Math.round(((to.cpuBusy - from.cpuBusy) / (to.cpuTotal - from.cpuTotal)) * 1000) /
      1000,
  };
}
