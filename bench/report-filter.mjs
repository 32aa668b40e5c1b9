// Section 3 of docs/benchmarks.md for bench/report.mjs: the filter's cost inside Envoy
// (filter-load.json) and its host calls per request (filter-cost.json), each goal of the gauge
// contract stated with its numbers side by side from one run.
import { barChart, COLORS, fmt, plural, spread } from "./report-lib.mjs";

const x3 = (value) => `×${fmt(value, 3)}`;
const us = (value, digits = 0) => `${fmt(value, digits)} µs`;
const signed = (value, digits = 1) => `${value >= 0 ? "+" : "−"}${fmt(Math.abs(value), digits)}`;
const count = (value) => fmt(value, Number.isInteger(value) ? 0 : 2);
const cellName = (cell) =>
  `${cell.protocol === "http1" ? "HTTP/1.1" : "HTTP/2"} c${cell.concurrency}`;
/** A second build without proxy_on_request_headers is worth it only if it saves at least this much Envoy CPU per request. */
const SECOND_BUILD_MIN_SAVING_US = 1;

/** Paired difference of CPU per request (newer JSON), else the difference of the medians. */
function cpuOver(variant, reference, field) {
  const paired = variant[field]?.median;
  return Number.isFinite(paired)
    ? paired
    : variant.cpu_us_per_request.median - reference.cpu_us_per_request.median;
}

/**
 * Writes the section through `line`, draws its chart with `chart`, and pushes `[goal, met,
 * measured]` rows to `goals` and sentences to `notAhead`.
 */
export function filterSections({ filterLoad, filterCost, line, chart, goals, quickNote }) {
  if (filterLoad) filterLoadSection({ filterLoad, line, chart, goals, quickNote });
  if (filterCost) filterCostSection({ filterCost, line, goals, quickNote });
}

function filterLoadSection({ filterLoad, line, chart, goals, quickNote }) {
  const label = (id) => filterLoad.variants.find((v) => v.id === id)?.label;
  line(`## 3. The filter's cost inside Envoy (\`filter-load.json\`)${quickNote(filterLoad)}`);
  line();
  line(
    "The same bootstrap, one listener answering 200 itself (a direct response: no upstream adds noise), through:",
  );
  line("- `none`: no wasm filter;");
  line(
    "- `noop`: a module with the filter's exports that does nothing (`bench/noop/index.ts`): Envoy's wasm plumbing alone;",
  );
  line("- `lastcall`: the filter now, heartbeats to a report sink;");
  if (label("no-rqh")) {
    line(
      "- `no-rqh` (saturated loads only): the filter built without `proxy_on_request_headers`\n  (`bench/filter-variants/no-request-headers.ts`, measurement only: `exclude_paths` does nothing in it);",
    );
  }
  if (label("before")) {
    line(
      `- \`before\` (saturated loads only): ${
        label("before").includes("shared-data counter")
          ? "the filter before its per-VM count (commit ed4e6f7: one process-wide counter in shared data, a compare-and-swap per +1 and −1), built by the harness"
          : label("before")
      }.`,
    );
  }
  line();
  line(
    `Saturated: \`wrk -t1 -c16\` (HTTP/1.1), \`h2load -c4 -m16\` (HTTP/2); fixed rate: \`h2load --rps\`, ${
      fmt(filterLoad.fixed_rate_rps)
    } requests per second.`,
  );
  line(
    `${filterLoad.seconds_per_run.saturated ?? filterLoad.seconds_per_run} s per saturated run, ${
      filterLoad.seconds_per_run.fixed ?? filterLoad.seconds_per_run
    } s at the fixed rate, ${plural(filterLoad.rounds, "round")}, variants alternating;`,
  );
  line(
    `ratios and differences are paired within a round. Envoy CPU per request: ${
      filterLoad.cpu_source ?? "/proc/<envoy>/stat (10 ms ticks) over the run ÷ completed requests"
    }.`,
  );
  line("The load generator shares the 2 CPUs with Envoy.");
  line();
  line(
    "| load | Envoy | variant | rps | ×none | ×noop | p50 | +p50 | +p99 | Envoy CPU per request | CPU over noop |",
  );
  line("|---|---|---|---|---|---|---|---|---|---|---|");
  for (const cell of filterLoad.cells) {
    const noop = cell.variants.find((v) => v.id === "noop");
    for (const v of cell.variants) {
      const base = v.id === "none";
      const floor = base || v.id === "noop";
      line(
        `| ${cell.load} | \`--concurrency ${cell.concurrency}\` | ${v.id} | ${spread(v.rps)} | ${
          base ? "" : spread(v.rps_ratio_to_none, (x) => fmt(x, 3))
        } | ${floor ? "" : spread(v.rps_ratio_to_noop, (x) => fmt(x, 3))} | ${
          us(v.p50_us.median)
        } | ${base ? "" : us(v.added_p50_us.median)} | ${base ? "" : us(v.added_p99_us.median)} | ${
          us(v.cpu_us_per_request.median, 1)
        } | ${floor || !noop ? "" : `${signed(cpuOver(v, noop, "cpu_us_over_noop"))} µs`} |`,
      );
    }
  }
  line();
  const groups = filterLoad.cells.map((cell) => ({
    title: `${cell.load}, --concurrency ${cell.concurrency}`,
    rows: cell.variants.filter((v) => v.id !== "none").map((v) => ({
      label: v.id,
      value: v.rps_ratio_to_none.median,
      min: v.rps_ratio_to_none.min,
      max: v.rps_ratio_to_none.max,
      color: v.id === "lastcall"
        ? COLORS.lastcall
        : v.id === "before" || v.id === "no-rqh"
        ? "#8fbfa5"
        : COLORS.other,
      note: `p50 ${v.added_p50_us.median >= 0 ? "+" : ""}${fmt(v.added_p50_us.median)} µs`,
    })),
  }));
  line(
    chart(
      "filter-load.svg",
      barChart(groups, {
        title: "Requests per second relative to no filter (median, min–max)",
        unit: "rps ÷ rps without a wasm filter",
        goals: [{ value: 0.9, label: "0.90" }],
        max: 1.2,
      }),
    ),
  );
  line();
  const rss = filterLoad.envoy_rss_mib;
  if (rss) {
    line("Envoy's RSS (MiB), idle after start and after the load:");
    line();
    line("| variant | `--concurrency 1` | `--concurrency 2` |");
    line("|---|---|---|");
    for (const v of filterLoad.variants) {
      line(
        `| ${v.label} | ${fmt(rss[`${v.id}/1`]?.idle, 1)} → ${
          fmt(rss[`${v.id}/1`]?.after_load, 1)
        } | ${fmt(rss[`${v.id}/2`]?.idle, 1)} → ${fmt(rss[`${v.id}/2`]?.after_load, 1)} |`,
      );
    }
    line();
  }
  filterLoadGoals({ filterLoad, line, goals });
}

function filterLoadGoals({ filterLoad, line, goals }) {
  const of = (cell, id) => cell.variants.find((v) => v.id === id);
  const sat = filterLoad.cells.filter((c) =>
    c.mode === "saturated" && of(c, "lastcall") && of(c, "none") && of(c, "noop")
  );
  const fixed = filterLoad.cells.filter((c) =>
    c.mode === "fixed" && of(c, "lastcall") && of(c, "none")
  );
  const rows = [];
  const goal = (name, checks) => {
    const met = checks.length > 0 && checks.every((c) => c.met);
    goals.push([`filter: ${name}`, met, checks.map((c) => `${c.cell} ${c.short}`).join("; ")]);
    for (const c of checks) {
      rows.push(`| ${name} | ${c.cell} | ${c.long} | ${c.met ? "yes" : "**no**"} |`);
    }
  };
  goal(
    "lastcall ÷ no-op ≥ 0.97 rps, saturated",
    sat.map((c) => {
      const l = of(c, "lastcall");
      const r = l.rps_ratio_to_noop.median;
      return {
        cell: cellName(c),
        met: r >= 0.97,
        short: x3(r),
        long: `${x3(r)}: ${fmt(l.rps.median)} vs ${fmt(of(c, "noop").rps.median)} rps`,
      };
    }),
  );
  goal(
    "lastcall ÷ no filter ≥ 0.90 rps, saturated",
    sat.map((c) => {
      const l = of(c, "lastcall");
      const r = l.rps_ratio_to_none.median;
      return {
        cell: cellName(c),
        met: r >= 0.9,
        short: x3(r),
        long: `${x3(r)}: ${fmt(l.rps.median)} vs ${
          fmt(of(c, "none").rps.median)
        } rps (the no-op module alone ${x3(of(c, "noop").rps_ratio_to_none.median)})`,
      };
    }),
  );
  goal(
    "Envoy CPU per request within 3 µs of the no-op module, saturated",
    sat.map((c) => {
      const l = of(c, "lastcall");
      const d = cpuOver(l, of(c, "noop"), "cpu_us_over_noop");
      return {
        cell: cellName(c),
        met: d <= 3,
        short: `${signed(d)} µs`,
        long: `${signed(d)} µs: ${us(l.cpu_us_per_request.median, 1)} vs ${
          us(of(c, "noop").cpu_us_per_request.median, 1)
        } (no filter ${us(of(c, "none").cpu_us_per_request.median, 1)})`,
      };
    }),
  );
  goal(
    `+p50 ≤ 20 µs over no filter at a fixed rate (${fmt(filterLoad.fixed_rate_rps)} rps)`,
    fixed.map((c) => {
      const l = of(c, "lastcall");
      const d = l.added_p50_us.median;
      return {
        cell: cellName(c),
        met: d <= 20,
        short: `${signed(d, 0)} µs`,
        long: `${signed(d, 0)} µs: p50 ${us(l.p50_us.median)} vs ${
          us(of(c, "none").p50_us.median)
        }${
          of(c, "noop")
            ? ` (the no-op module alone ${signed(of(c, "noop").added_p50_us.median, 0)} µs)`
            : ""
        }`,
      };
    }),
  );
  line(
    "**The filter's goals, from this run** (paired medians; the comparison in each row is from the same rounds):",
  );
  line();
  line("| goal | cell | measured: lastcall vs the reference | met |");
  line("|---|---|---|---|");
  for (const row of rows) line(row);
  line();
  secondBuild({ sat, of, line });
  beforeAfter({ sat, of, line });
}

/** Whether a module without proxy_on_request_headers (configurations without exclude_paths) is worth a second build. */
function secondBuild({ sat, of, line }) {
  const cells = sat.filter((c) => of(c, "no-rqh"));
  if (cells.length === 0) return;
  const saved = cells.map((c) =>
    -cpuOver(of(c, "no-rqh"), of(c, "lastcall"), "cpu_us_over_lastcall")
  );
  const ratios = cells.map((c) =>
    of(c, "no-rqh").rps_ratio_to_lastcall?.median ??
      of(c, "no-rqh").rps.median / of(c, "lastcall").rps.median
  );
  const sorted = [...saved].sort((a, b) => a - b);
  const median =
    (sorted[Math.floor((sorted.length - 1) / 2)] + sorted[Math.ceil((sorted.length - 1) / 2)]) / 2;
  const worth = median >= SECOND_BUILD_MIN_SAVING_US;
  line(
    `**A second build without \`proxy_on_request_headers\`** (for configurations without \`exclude_paths\`): ${
      worth ? "**worth it**" : "**not worth it**"
    } in this run.`,
  );
  line(
    `Saved Envoy CPU per request (lastcall − no-rqh, paired) and rps no-rqh ÷ lastcall: ${
      cells.map((c, i) => `${cellName(c)} ${signed(saved[i], 2)} µs, ${x3(ratios[i])}`).join("; ")
    }.`,
  );
  line(
    `Rule: worth it if the median saving over the saturated cells is at least ${SECOND_BUILD_MIN_SAVING_US} µs of Envoy CPU per request (a third of`,
  );
  line(`the 3 µs budget over the no-op module); the median here is ${signed(median, 2)} µs.`);
  line();
}

/** The before/after table of the gauge contract's first section, from this run. */
function beforeAfter({ sat, of, line }) {
  const cells = sat.filter((c) => of(c, "before"));
  if (cells.length === 0) return;
  line(
    "Before and after the per-VM count (saturated, this run): rps ÷ no filter, ÷ no-op module, Envoy CPU per request.",
  );
  line();
  line(
    "| saturated | ÷ no filter: before → now | ÷ no-op: before → now | Envoy CPU per request: before → now (none, no-op) |",
  );
  line("|---|---|---|---|");
  for (const c of cells) {
    const b = of(c, "before");
    const l = of(c, "lastcall");
    line(
      `| ${cellName(c)} | ${fmt(b.rps_ratio_to_none.median, 3)} → ${
        fmt(l.rps_ratio_to_none.median, 3)
      } | ${fmt(b.rps_ratio_to_noop.median, 3)} → ${fmt(l.rps_ratio_to_noop.median, 3)} | ${
        us(b.cpu_us_per_request.median, 1)
      } → ${us(l.cpu_us_per_request.median, 1)} (${
        fmt(of(c, "none").cpu_us_per_request.median, 1)
      }, ${fmt(of(c, "noop").cpu_us_per_request.median, 1)}) |`,
    );
  }
  line();
}

function filterCostSection({ filterCost, line, goals, quickNote }) {
  line(
    `### Host calls per request, and the in-process cost (\`filter-cost.json\`)${
      quickNote(filterCost)
    }`,
  );
  line();
  const calls = filterCost.host_calls_per_request;
  const entries = filterCost.vm_entries_per_request ?? {};
  const kinds = [...new Set(Object.values(calls).flatMap((c) => Object.keys(c)))]
    .sort((a, b) =>
      Number(b.includes("shared_data")) - Number(a.includes("shared_data")) || a.localeCompare(b)
    );
  const total = (c) => Object.values(c ?? {}).reduce((a, b) => a + b, 0);
  const shared = (c) =>
    Object.entries(c ?? {}).filter(([k]) => k.includes("shared_data")).reduce(
      (a, [, n]) => a + n,
      0,
    );
  line(
    `Every host call (wasm → host import) per request outside a drain, counted by import in the in-process proxy-wasm host`,
  );
  line(
    `(\`test/support/proxy-wasm-host.ts\`), ${
      filterCost.host_calls_counted_over ?? "one request at low load (0 → 1 → 0)"
    }.`,
  );
  line(
    "Calls into the VM: the per-request callbacks the module exports (Envoy enters the VM only for those).",
  );
  line();
  line(
    `| module | calls into the VM | ${
      kinds.map((k) => `\`${k}\``).join(" | ")
    } | host calls in all |`,
  );
  line(`|---|---|${kinds.map(() => "---|").join("")}---|`);
  for (const [id, c] of Object.entries(calls)) {
    line(
      `| ${id} | ${entries[id] ?? entries[id.split(",")[0]] ?? "–"} | ${
        kinds.map((k) => count(c[k] ?? 0)).join(" | ")
      } | ${count(total(c))} |`,
    );
  }
  line();
  const lc = calls.lastcall;
  if (lc) {
    goals.push([
      "filter-cost: 0 shared-data calls per request outside a drain",
      shared(lc) === 0,
      `${count(shared(lc))} (every host call: ${
        Object.entries(lc).map(([k, n]) => `\`${k}\` ${count(n)}`).join(", ") || "none"
      })`,
    ]);
    goals.push([
      "filter-cost: exactly 2 host calls per request outside a drain, both `proxy_increment_metric`",
      lc.proxy_increment_metric === 2 && total(lc) === 2,
      `${count(lc.proxy_increment_metric ?? 0)} \`proxy_increment_metric\`, ${
        count(total(lc))
      } in all`,
    ]);
  }
  line(
    "The contract (`docs/filter-protocol.md`): a stream is +1 on one process-wide Envoy gauge at its creation and −1 at",
  );
  line(
    "its deletion (`proxy_increment_metric`), nothing else outside a drain: no shared data, no report, no allocation.",
  );
  line(
    "`proxy_on_request_headers` is still entered (it returns at once when no plugin of the VM has `exclude_paths`);",
  );
  line(
    "with `exclude_paths` set it reads `:path` (one `proxy_get_header_map_value`) and remembers the stream's plugin.",
  );
  line(
    "`no-rqh` is the filter without that export (one call into the VM fewer; measurement only).",
  );
  line();
  line(
    "µs per request in the in-process host (V8 in Node, not Envoy: compares modules, not absolute costs):",
  );
  line();
  line(`| live streams | ${filterCost.modules.join(" | ")} |`);
  line(`|---|${filterCost.modules.map(() => "---|").join("")}`);
  for (const cell of filterCost.cells) {
    line(
      `| ${fmt(cell.live)} | ${
        filterCost.modules.map((m) => `${fmt(cell.us_per_request[m], 1)} µs`).join(" | ")
      } |`,
    );
  }
  line();
  line(
    "The SDK's stock exports cost grows with live streams (they log every live context id on each new stream).",
  );
  line();
}
