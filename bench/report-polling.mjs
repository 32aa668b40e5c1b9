// Section 2 of docs/benchmarks.md for bench/report.mjs: what the incumbents poll as the
// configuration grows (polling.json).
import { barChart, colorOf, fmt, ms } from "./report-lib.mjs";

/** Writes section 2 through `line`, draws its chart with `chart`, and pushes sentences to `notAhead`. */
export function pollingSection({ polling, line, chart, notAhead, quickNote }) {
  if (!polling) return;
  line(
    `## 2. What the incumbents poll, as the configuration grows (\`polling.json\`)${
      quickNote(polling)
    }`,
  );
  line();
  line(
    "Envoy (`--concurrency 2`) with 100, 1,000 and 5,000 static clusters; each query in turn, idle and under a",
  );
  line(
    "saturating `wrk -c16` load; latency per call, and CPU of Envoy's main thread per call (from",
  );
  line(
    "`/proc/<pid>/task/<pid>/schedstat`: the admin runs on the main thread, beside xDS and stats flushes).",
  );
  line(
    "`per s` is that CPU times the query's poll rate: what polling costs Envoy each second of a drain.",
  );
  line();
  line(
    "| clusters | query | idle: latency | idle: CPU per call | under load: latency (max) | polled every | CPU per s of drain |",
  );
  line("|---|---|---|---|---|---|---|");
  for (const row of polling.cells) {
    const perSecond = row.poll_period_s
      ? `${fmt(row.idle.cpu_ms.median / row.poll_period_s, 1)} ms`
      : "one call";
    line(
      `| ${fmt(row.clusters)} | ${row.label} | ${ms(row.idle.ms.median)} | ${
        fmt(row.idle.cpu_ms.median, 1)
      } ms | ${ms(row.load.ms.median)} (${ms(row.load.ms.max)}) | ${
        row.poll_period_s ? `${row.poll_period_s} s` : "at the stop"
      } | ${perSecond} |`,
    );
  }
  line();
  line(
    "Queries: Istio `" + (polling.cells.find((c) => c.query === "istio")?.path ?? "") +
      "`; Contour `" + (polling.cells.find((c) => c.query === "contour")?.path ?? "") + "`;",
  );
  line(
    "lastcall `requests` `" +
      (polling.cells.find((c) => c.query === "lastcall-requests")?.path ?? "") +
      "`; lastcall `inflight` polls nothing (the filter",
  );
  line(
    "pushes), and its last count before the stop is a pull the filter answers (one gauge read in Envoy, no admin call);",
  );
  line(
    "only when some listener has no filter does it read `" +
      (polling.cells.find((c) => c.query === "lastcall-inflight")?.path ?? "") + "` once.",
  );
  line();
  const clusters = [...new Set(polling.cells.map((c) => c.clusters))];
  const groups = clusters.map((n) => ({
    title: `${fmt(n)} clusters`,
    rows: polling.cells.filter((c) => c.clusters === n).map((c) => ({
      label: c.label,
      value: c.load.ms.median,
      min: c.load.ms.min,
      max: c.load.ms.max,
      color: colorOf(c.query),
      note: `idle ${ms(c.idle.ms.median)}, cpu ${fmt(c.idle.cpu_ms.median, 1)} ms`,
    })),
  }));
  line(
    chart(
      "polling.svg",
      barChart(groups, {
        title: "Admin call latency under load (median, min–max)",
        unit: "ms per call",
        labelWidth: 270,
      }),
    ),
  );
  line();
  const dearer = [];
  for (const n of clusters) {
    const req = polling.cells.find((c) => c.clusters === n && c.query === "lastcall-requests");
    const istio = polling.cells.find((c) => c.clusters === n && c.query === "istio");
    if (
      req && istio &&
      req.idle.cpu_ms.median / req.poll_period_s > istio.idle.cpu_ms.median / istio.poll_period_s
    ) {
      dearer.push(
        `${fmt(n)} clusters ${fmt(req.idle.cpu_ms.median / req.poll_period_s, 1)} vs ${
          fmt(istio.idle.cpu_ms.median / istio.poll_period_s, 1)
        } ms`,
      );
    }
  }
  if (dearer.length) {
    notAhead.push(
      `polling: lastcall's \`requests\` mode (Istio-compatible, polls every ${
        (polling.cells.find((c) => c.query === "lastcall-requests")?.poll_period_s ?? 0.2) * 1000
      } ms) costs Envoy more CPU per second of drain than Istio's 1 s poll (${
        dearer.join("; ")
      } per s). The default \`inflight\` mode polls nothing, and its last count before the stop is a pull through the filter (one gauge read), not a read of Envoy's stats; only listeners the filter cannot see add one stats read at the stop, costing what one Istio poll does.`,
    );
  }
}
