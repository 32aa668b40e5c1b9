// Summaries of repeated measurements: medians and spread, never a mean alone (shared CPUs are noisy).

/** The value at quantile `q` (0..1) of `values`, linear between neighbours; NaN when empty. */
export function quantile(values: readonly number[], q: number): number {
  const sorted = values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b);
  if (sorted.length === 0) return Number.NaN;
  const at = (sorted.length - 1) * q;
  const low = Math.floor(at);
  const high = Math.ceil(at);
  return sorted[low]! + (sorted[high]! - sorted[low]!) * (at - low);
}

/** Median, min, max and count of a sample: what every table and chart shows. */
export interface Summary {
  median: number;
  min: number;
  max: number;
  n: number;
}

/** Summarizes a sample, rounded to `digits` decimals. */
export function summarize(values: readonly number[], digits = 3): Summary {
  const finite = values.filter((v) => Number.isFinite(v));
  return {
    median: round(quantile(finite, 0.5), digits),
    min: round(finite.length ? Math.min(...finite) : Number.NaN, digits),
    max: round(finite.length ? Math.max(...finite) : Number.NaN, digits),
    n: finite.length,
  };
}

/** Rounds to `digits` decimals (NaN stays NaN, written as null in JSON). */
export function round(value: number, digits = 3): number {
  const scale = 10 ** digits;
  return Math.round(value * scale) / scale;
}
