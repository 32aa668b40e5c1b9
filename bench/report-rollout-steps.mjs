// The rollout's steps in docs/benchmarks.md (bench/results/rollout.json): one old pod's deletion
// to the next one's, the time each new pod costs a rollout that replaces one pod at a time.
import { fmt } from "./report-lib.mjs";

/** The kubelet's relist period (PLEG), about which steps fall. */
const RELIST_MS = 1000;
const WORDS = ["none", "one", "two", "three", "four", "five"];

/** The steps of `id`'s runs of `workload`, in ms: the gaps between its old pods' deletions. */
function steps(rollout, workload, id) {
  return rollout.runs
    .filter((r) => r.workload === workload && r.contender === id)
    .flatMap((r) => {
      const at = r.pods.map((p) => p.deleted_at_ms).filter((t) => t !== undefined && t !== null)
        .sort((a, b) => a - b);
      return at.slice(1).map((t, i) => t - at[i]);
    });
}

/**
 * The median of `values` (the mean of the middle two for an even count); NaN when empty.
 *
 * @example
 * median([941, 946, 951, 968]); // 948.5
 */
export function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  if (sorted.length === 0) return Number.NaN;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/**
 * Writes the steps table through `line`: per contender and workload, the median step (min–max)
 * and its steps by the relists they took (`one: 5, two: 1`).
 *
 * @example
 * stepsTable({ rollout, line });
 */
export function stepsTable({ rollout, line }) {
  const workloads = rollout.summary;
  if (!rollout.runs.some((r) => r.pods?.some((p) => typeof p.deleted_at_ms === "number"))) return;
  const ms = (v) => `${fmt(v / 1000, 2)} s`;
  line(
    "**The rollout's steps.** The Deployment deletes an old pod as each new pod is Ready and creates the next new",
  );
  line(
    "pod then: a step (one old pod's deletion → the next one's) is what each new pod costs the rollout. A new pod",
  );
  line(
    "is Ready at the first kubelet relist that sees its containers started (relists come about every second), so",
  );
  line(
    "steps fall near whole seconds: one relist per step in the container layout, two in the native one (the sidecar,",
  );
  line(
    "then the app). A later new pod's creation → Ready is its step less the control plane's reaction to the pod",
  );
  line(
    'before it (its Ready seen → this pod created): where no relist is lost, "new pod Ready" above differs between',
  );
  line("contenders of one layout by that reaction, not by the pod.");
  line();
  line(
    `| contender | ${
      workloads.map((w) => `\`${w.workload}\`: step, median (min–max) | steps by relists`).join(
        " | ",
      )
    } |`,
  );
  line(`|---|${workloads.map(() => "---|---|").join("")}`);
  for (const c of workloads[0].contenders) {
    const cells = workloads.map((w) => {
      const s = steps(rollout, w.workload, c.id);
      if (s.length === 0) return "– | –";
      const by = new Map();
      for (const v of s) {
        const n = Math.max(1, Math.round(v / RELIST_MS));
        by.set(n, (by.get(n) ?? 0) + 1);
      }
      const relists = [...by].sort(([a], [b]) => a - b).map(([n, k]) => `${WORDS[n] ?? n}: ${k}`);
      return `${ms(median(s))} (${ms(Math.min(...s))}–${ms(Math.max(...s))}) | ${
        relists.join(", ")
      }`;
    });
    line(`| ${c.label} | ${cells.join(" | ")} |`);
  }
  line();
}

/**
 * Writes, when the runs carry them, the kubelet's relists (from its own metrics) and the host's
 * busy CPU over each rollout, per contender and workload: whether a contender's pods slowed the
 * relists that decide its steps.
 *
 * @example
 * relistsTable({ rollout, line });
 */
export function relistsTable({ rollout, line }) {
  const workloads = rollout.summary;
  if (!rollout.runs.some((r) => r.relists)) return;
  line(
    "**The kubelet's relists during the rollouts** (its `kubelet_pleg_relist_interval_seconds` and",
  );
  line(
    "`…_duration_seconds`, restart → `rollout status` returned; median of the rounds), and the share of",
  );
  line("the host's 2 cores that was busy then:");
  line();
  line(
    `| contender | ${
      workloads.map((w) => `\`${w.workload}\`: relists apart (each) | host CPU busy`).join(" | ")
    } |`,
  );
  line(`|---|${workloads.map(() => "---|---|").join("")}`);
  for (const c of workloads[0].contenders) {
    const cells = workloads.map((w) => {
      const runs = rollout.runs.filter((r) =>
        r.workload === w.workload && r.contender === c.id && r.relists
      );
      if (runs.length === 0) return "– | –";
      const of = (key) => median(runs.map((r) => r.relists[key]));
      return `${fmt(of("interval_mean_ms"), 1)} ms (${fmt(of("duration_mean_ms"), 1)} ms) | ${
        Math.round(of("host_cpu_busy") * 100)
      } %`;
    });
    line(`| ${c.label} | ${cells.join(" | ")} |`);
  }
  line();
}
