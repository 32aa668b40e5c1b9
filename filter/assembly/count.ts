// The count: one process-wide Envoy gauge moved ±1 by every worker VM; moves to or from zero are
// pushed during a drain.
import { MetricType, Result, proxy_define_metric, proxy_get_metric, proxy_increment_metric } from "./abi";
import { OUT_U32, utf8 } from "./memory";

let gauge: u32 = 0;
let gaugeDefined = false;
/** Counted streams this VM finished since the last `takeFinished` (flushed on the heartbeat). */
let finished: u64 = 0;
const readSlot = __alloc(8, 0);

/** Whether this VM learned from the agent that it drains (sticky: a drain ends with the process). */
export let draining = false;
/**
 * Whether this VM pushes moves to and from zero: it drains, and an answer saying so was not
 * quiet (sticky too: a late quiet answer must not silence the zero push).
 */
export let pushing = false;

/**
 * Records that the agent drains; `quiet` (the drain's floor still holds, so no zero can end it
 * yet) holds the pushes back until an answer without it.
 */
export function learnDraining(quiet: bool): void {
  draining = true;
  if (!quiet) pushing = true;
}

/**
 * The gauge's name: `base` (the plugin's `gauge`), with `_odd` for odd restart epochs. A
 * hot-restart child imports its parent's gauges into its own (Envoy's stat merge, up to one stats
 * flush late, dropped when the parent exits): with one name per parity, a child's gauge never
 * holds its parent's count.
 */
export function gaugeName(base: string, epoch: u64): string {
  return epoch % 2 == 0 ? base : base + "_odd";
}

/**
 * Defines (or finds) a `wasmcustom.<name>` metric of this VM and returns its id; -1 if the host
 * refused it. Metric ids are per VM.
 */
export function defineMetric(type: MetricType, name: string): i64 {
  const bytes = utf8(name);
  store<u32>(OUT_U32, 0);
  if (proxy_define_metric(type, changetype<usize>(bytes), bytes.byteLength, OUT_U32) != Result.Ok) return -1;
  return load<u32>(OUT_U32) as i64;
}

/** Defines the VM's gauge once; false if the host refused it. */
export function defineGauge(base: string, epoch: u64): bool {
  if (gaugeDefined) return true;
  const id = defineMetric(MetricType.Gauge, gaugeName(base, epoch));
  if (id < 0) return false;
  gauge = id as u32;
  gaugeDefined = true;
  return true;
}

/** A stream began: +1. */
export function countStart(): void {
  proxy_increment_metric(gauge, 1);
}

/** A counted stream ended (or was excluded): −1, exactly once per +1. */
export function countEnd(finishedStream: bool): void {
  proxy_increment_metric(gauge, -1);
  if (finishedStream) finished++;
}

/** The process-wide count now; -1 if the host failed the read. */
export function readCount(): i64 {
  store<u64>(readSlot, 0);
  if (proxy_get_metric(gauge, readSlot) != Result.Ok) return -1;
  return load<i64>(readSlot);
}

/** Streams finished since the last call (for `lastcall_streams_total`, added once per heartbeat). */
export function takeFinished(): u64 {
  const n = finished;
  finished = 0;
  return n;
}
