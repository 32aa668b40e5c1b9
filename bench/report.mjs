#!/usr/bin/env node
// Writes docs/benchmarks.md and its charts (docs/bench/*.svg) from bench/results/*.json: every
// number on the page comes from those files, every chart is drawn here as plain SVG. Run by
// `npm run bench` at the end; alone: `node bench/report.mjs`.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const read = (name) => {
  const path = join(root, "bench/results", `${name}.json`);
  return existsSync(path) ? JSON.parse(readFileSync(path, "utf8")) : undefined;
};
const termination = read("termination");
const polling = read("polling");
const filterLoad = read("filter-load");
const footprint = read("footprint");
const filterCost = read("filter-cost");
const push = read("inflight-push");
const rollout = read("rollout");
const startup = read("startup");

import { filterSections } from "./report-filter.mjs";
import { rolloutSection, startupSection } from "./report-rollout.mjs";
import { barChart, colorOf, fmt, ms, plural, spread } from "./report-lib.mjs";

mkdirSync(join(root, "docs/bench"), { recursive: true });
const charts = [];
function chart(name, svg) {
  writeFileSync(join(root, "docs/bench", name), svg);
  charts.push(name);
  return `![${name}](bench/${name})`;
}

// ---------- the page ----------
const out = [];
const goals = [];
const notAhead = [];
const line = (text = "") => out.push(text);
const quickNote = (
  result,
) => (result?.quick ? " **(--quick run: one round, numbers not for publishing)**" : "");

line("# Benchmarks");
line();
line(
  "`npm run bench` builds what it needs (the filter, the agent, the no-op module, the filter as it was before",
);
line(
  "its per-VM count (ed4e6f7) and without `proxy_on_request_headers` (measurement only), and the incumbents' real code with Go into",
);
line(
  "`.cache/anchors/`: Contour v1.33.8's `cmd/contour` and `bench/anchors/istio-agent`, a small main around Istio's",
);
line(
  "`pkg/envoy`), runs every benchmark against the real Envoy one after the other, writes `bench/results/*.json`, and regenerates",
);
line(
  "this page and its charts from them (`bench/report.mjs`). `npm run bench -- --quick` runs one round of",
);
line(
  "each to prove the harness; `--only termination,polling` runs some (`--only rollout`: the rollout on a real kubelet,",
);
line(
  "with Envoy Gateway v1.9.1's `cmd/envoy-gateway` built too). Load generators: Debian's `wrk` and",
);
line("`h2load` (nghttp2-client), installed with apt-get when missing.");
line();
const env = [termination, filterLoad, footprint].find(Boolean);
line(
  `Machine: 2 shared CPUs, Node ${
    env?.node ?? "20"
  }, Envoy 1.40.0. Contenders and variants alternate within every round;`,
);
line("medians, with the spread (min–max) in parentheses. Every sample is in the JSON.");
const timed = [["termination", termination], ["polling", polling], ["filter-load", filterLoad], [
  "footprint",
  footprint,
], ["rollout", rollout]].filter(([, r]) => r?.seconds);
if (timed.length) {
  const total = timed.reduce((a, [, r]) => a + r.seconds, 0);
  line(
    `Time of this run: ${timed.map(([n, r]) => `${n} ${Math.round(r.seconds)} s`).join(", ")}: ${
      fmt(total / 60, 1)
    } min, plus about a minute for the`,
  );
  line(
    "build, the in-process filter cost and the push benchmark (and the Go builds of the incumbents the first time).",
  );
}
line();

// ---- 1. termination ----
if (termination) {
  line(
    `## 1. Termination, side by side (\`termination.json\`)${quickNote(termination)}${
      termination.complete === false
        ? ` **(cut short: ${termination.runs.length} runs measured)**`
        : ""
    }`,
  );
  line();
  const sizes = termination.clusters;
  line(
    `One Envoy configuration (one INBOUND listener in front of one upstream app${
      sizes ? `, ${fmt(sizes.small)} clusters in all` : ""
    }, \`--concurrency ${termination.parity.concurrency}\`), one`,
  );
  line(
    "client workload, each contender in turn told to stop the way Kubernetes does it: SIGTERM to the agent",
  );
  line(
    "(lastcall, Istio); for Contour both preStop hooks at once (`contour envoy shutdown` and Envoy's",
  );
  line(
    "`GET :8090/shutdown`), then SIGTERM to each container whose hook returned. Everything is SIGKILLed at",
  );
  line(
    `the pod's grace period, ${termination.parity.grace_ms / 1000} s. ${
      plural(termination.rounds, "round")
    } per contender and workload.`,
  );
  line();
  line(
    "The workload: 6 HTTP/1.1 keep-alive clients looping requests of 10 ms–3 s, 2 keep-alive clients looping",
  );
  line(
    "3 s requests, one HTTP/2 connection with 4 concurrent streams of the same mix, a streaming response (3 s",
  );
  line(
    "of chunks, started 0.5 s before the signal), a WebSocket open across the signal (closed by the client",
  );
  line(
    `2.5 s after it), and new requests (old and new connections) for ${
      termination.parity.endpoint_lag_ms / 1000
    } s after the signal: the`,
  );
  line(
    "endpoint-removal lag, while load balancers still send traffic. Then clients stop sending; what is in",
  );
  line(
    "flight must complete. Workload `idle` adds 6 keep-alive connections that made one request and stay idle,",
  );
  line("as client pools do.");
  if (sizes) {
    line(
      `Workload \`busy-${sizes.large}\` is \`busy\` on the same configuration grown to ${
        fmt(sizes.large)
      } clusters (Envoy's stats grow with`,
    );
    line(
      `them; section 2), for ${
        sizes.large_contenders.map((id) => `\`${id}\``).join(" and ")
      } only: whatever lastcall reads before the stop must not grow with them.`,
    );
  }
  line();
  line(
    "Settings: every contender's defaults, except for parity: lastcall `--grace` = the pod's grace and",
  );
  line(
    `\`--min-drain\` = the endpoint lag (${
      termination.parity.endpoint_lag_ms / 1000
    } s; default 5 s), and Istio exit-on-zero's`,
  );
  line(
    `\`MINIMUM_DRAIN_DURATION\` = the same lag (default 5 s). Istio default sleeps its default 5 s; Contour runs`,
  );
  line(
    "its default 5 s check interval and 1 s. Envoy gone = its process exited (polled every 2 ms).",
  );
  line();
  line(
    "- failed: requests that got a 5xx, a reset or a refused connection (the WebSocket closed other than by",
  );
  line("  the client, a streaming response cut short);");
  line("- tail: last good response → Envoy gone; total: signal → Envoy gone.");
  if (sizes) {
    line(
      "- lastcall's own share of the tail: the client's last good response → Envoy told to quit (Envoy received",
    );
    line(
      "  `POST /quitquitquit`: the start time in Envoy's admin access log, which the harness adds to lastcall's",
    );
    line(
      "  config), both on the machine's wall clock (ms). In parentheses: → `drain_wait_done` (the drain decided: the",
    );
    line(
      "  pushed zero confirmed by a probe the filter answers) and → `envoy_quit_requested` (lastcall logs it once Envoy",
    );
    line(
      "  has answered the quit, which Envoy does only after part of its own shutdown: that part is Envoy's). The rest",
    );
    line(
      "  of the tail is Envoy's own exit. Runs whose last response came before the minimum drain ended are left out",
    );
    line(
      "  (their share would be the floor's wait); negative: the client read its last byte after Envoy was told to",
    );
    line("  quit (a slow reader's bytes already in its socket).");
    line(
      "- What lastcall's share is made of (measured while writing this, one held request, quiet machine, 4 runs):",
    );
    line(
      "  the pushed zero confirmed by a pull, 2 ms after the client's last byte; then the delivery check, 8–9 ms:",
    );
    line(
      "  one read of `/proc/net/tcp`, which walks the kernel's whole TCP connection hash (262,144 buckets here,",
    );
    line(
      '  whatever the number of sockets: the price of "every response byte delivered"); then `/quitquitquit`,',
    );
    line(
      "  1–2 ms. Under the busy workload each step takes longer (both CPUs are shared with the load).",
    );
  }
  line();
  for (const workload of termination.summary) {
    line(`**Workload \`${workload.workload}\`**: ${workload.what}.`);
    line();
    line(
      "| contender | failed (all runs) | tail | total | killed at grace | lastcall's own share (decided; quit answered) |",
    );
    line("|---|---|---|---|---|---|");
    for (const c of workload.contenders) {
      const share = c.lastcall_share_ms?.n
        ? `${spread(c.lastcall_share_ms, ms)} (${ms(c.lastcall_decided_ms.median)}; ${
          ms(c.lastcall_quit_answered_ms.median)
        })${c.runs_ended_in_floor ? `, ${c.runs_ended_in_floor} run(s) in the floor left out` : ""}`
        : "";
      line(
        `| ${c.label} | ${c.failed_total} | ${spread(c.tail_ms, ms)} | ${
          spread(c.total_ms, ms)
        } | ${c.killed_at_grace} of ${c.runs} | ${share} |`,
      );
    }
    line();
  }
  const groups = termination.summary.map((w) => ({
    title: `workload ${w.workload}`,
    rows: w.contenders.map((c) => ({
      label: c.id,
      value: c.total_ms.median / 1000,
      min: c.total_ms.min / 1000,
      max: c.total_ms.max / 1000,
      color: colorOf(c.id),
      note: `tail ${ms(c.tail_ms.median)}${c.failed_total ? `, ${c.failed_total} failed` : ""}`,
    })),
  }));
  line(
    chart(
      "termination.svg",
      barChart(groups, {
        title: "Signal → Envoy gone (median, min–max), by contender",
        unit: "seconds after SIGTERM",
        goals: [{ value: termination.parity.grace_ms / 1000, label: "grace" }],
      }),
    ),
  );
  line();
  // goals for lastcall inflight
  const inflight = termination.summary.map((w) => ({
    w,
    c: w.contenders.find((c) => c.id === "lastcall-inflight"),
  })).filter((x) => x.c);
  const failed = inflight.reduce((a, x) => a + x.c.failed_total, 0);
  const tails = inflight.map((x) => x.c.tail_ms.median);
  goals.push([
    `termination: lastcall \`inflight\` 0 failed requests`,
    failed === 0,
    `${failed} failed in ${inflight.reduce((a, x) => a + x.c.runs, 0)} runs`,
  ]);
  goals.push([
    "termination: tail median ≤ 20 ms",
    tails.every((t) => t <= 20),
    tails.map((t, i) => `${inflight[i].w.workload} ${ms(t)}`).join(", "),
  ]);
  if (sizes) {
    for (const size of [sizes.small, sizes.large]) {
      const here = inflight.filter((x) => x.w.clusters === size && x.c.lastcall_share_ms?.n);
      goals.push([
        `termination: lastcall's own share of the tail (last response → Envoy told to quit) ≤ 10 ms median, ${
          fmt(size)
        } clusters`,
        here.length > 0 && here.every((x) => x.c.lastcall_share_ms.median <= 10),
        here.length
          ? here.map((x) =>
            `${x.w.workload} ${ms(x.c.lastcall_share_ms.median)} (decided ${
              ms(x.c.lastcall_decided_ms.median)
            }, quit answered ${ms(x.c.lastcall_quit_answered_ms.median)})`
          ).join(", ")
          : "not measured",
      ]);
    }
    const small = inflight.find((x) => x.w.workload === "busy");
    const large = inflight.find((x) => x.w.workload === `busy-${sizes.large}`);
    const ratio = small && large ? large.c.tail_ms.median / small.c.tail_ms.median : Number.NaN;
    goals.push([
      `termination: tail at ${fmt(sizes.large)} clusters within 1.5× of ${
        fmt(sizes.small)
      } clusters (\`inflight\`, workload \`busy\`)`,
      ratio <= 1.5,
      Number.isFinite(ratio)
        ? `×${fmt(ratio, 2)}: ${ms(large.c.tail_ms.median)} vs ${ms(small.c.tail_ms.median)}${
          large.c.envoy_exit_ms?.n
            ? `; of which Envoy's own exit (told to quit → gone) ${
              ms(large.c.envoy_exit_ms.median)
            } vs ${ms(small.c.envoy_exit_ms.median)}`
            : ""
        }`
        : "not measured",
    ]);
  }
  const slower = [];
  for (const { w, c } of inflight) {
    const incumbents = w.contenders.filter((x) => !x.id.startsWith("lastcall"));
    if (incumbents.length === 0) continue;
    const fastest = incumbents.reduce((a, b) => (b.total_ms.median < a.total_ms.median ? b : a));
    if (c.total_ms.median > fastest.total_ms.median) {
      slower.push(
        `${w.workload}: ${ms(c.total_ms.median)} vs ${fastest.id} ${ms(fastest.total_ms.median)}${
          fastest.failed_total ? ` (which failed ${fastest.failed_total} requests)` : ""
        }`,
      );
    }
  }
  goals.push([
    "termination: never slower (signal → gone) than the fastest incumbent on any workload",
    slower.length === 0,
    slower.length ? slower.join("; ") : "faster on every workload",
  ]);
  const left = termination.lastcall_run_dirs_left ?? [];
  const lastcallRuns = termination.runs.filter((r) => r.contender.startsWith("lastcall")).length;
  goals.push([
    "termination: no `/tmp/lastcall-*` folder left after a clean exit",
    left.length === 0 && (termination.lastcall_clean_exits ?? lastcallRuns) > 0,
    left.length
      ? `${left.length} left: ${left.slice(0, 2).join(", ")}`
      : `none left after ${
        termination.lastcall_clean_exits ?? lastcallRuns
      } clean exits (code 0) of ${lastcallRuns} lastcall runs`,
  ]);
  if (termination.errors?.length) {
    line(
      `**${termination.errors.length} run(s) could not be measured** (a contender did not start); their errors are in the JSON.\n`,
    );
  }
  for (const { w, c } of inflight) {
    for (const other of w.contenders.filter((x) => !x.id.startsWith("lastcall"))) {
      if (other.failed_total <= c.failed_total && other.total_ms.median < c.total_ms.median) {
        notAhead.push(
          `termination, workload \`${w.workload}\`: ${other.label} ended sooner (${
            ms(other.total_ms.median)
          } vs ${ms(c.total_ms.median)}) with ${other.failed_total} failed requests.`,
        );
      }
    }
  }
  for (const w of termination.summary) {
    for (const c of w.contenders.filter((x) => x.id.startsWith("lastcall") && x.failed_total > 0)) {
      const bad = termination.runs.filter((r) =>
        r.workload === w.workload && r.contender === c.id && r.failed > 0
      );
      const why = bad.map((r) =>
        `round ${r.round + 1}: ${r.failed} failed, Envoy gone ${ms(r.total_ms)} after the signal${
          r.lastcall_events?.find((e) => e.event === "terminated")
            ? `, lastcall \`terminated\` reason \`${
              r.lastcall_events.find((e) => e.event === "terminated").reason
            }\``
            : ""
        }`
      );
      notAhead.push(
        `termination, workload \`${w.workload}\`: ${c.label} lost requests (${
          why.join("; ")
        }); every incumbent with 0 failed requests did better there.`,
      );
    }
  }
  const requests = termination.summary.map((w) => ({
    w,
    c: w.contenders.find((c) => c.id === "lastcall-requests"),
    i: w.contenders.find((c) => c.id === "lastcall-inflight"),
  }));
  for (const { w, c, i } of requests) {
    if (c && i && c.tail_ms.median < i.tail_ms.median) {
      notAhead.push(
        `termination, workload \`${w.workload}\`: lastcall's own \`requests\` mode had a shorter tail than \`inflight\` (${
          ms(c.tail_ms.median)
        } vs ${ms(i.tail_ms.median)}).`,
      );
    }
  }
}

// ---- 2. polling ----
if (polling) {
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
    "lastcall `requests` `" + (polling.cells.find((c) =>
      c.query === "lastcall-requests"
    )?.path ?? "") + "`; lastcall `inflight` polls nothing (the filter",
  );
  line(
    "pushes), and its last count before the stop is a pull the filter answers (one gauge read in Envoy, no admin call);",
  );
  line(
    "only when some listener has no filter does it read `" + (polling.cells.find((c) =>
      c.query === "lastcall-inflight"
    )?.path ?? "") + "` once.",
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

// ---- 3. filter load and cost ----
filterSections({ filterLoad, filterCost, line, chart, goals, quickNote });

// ---- 4. footprint ----
if (footprint) {
  line(`## 4. Footprint (\`footprint.json\`)${quickNote(footprint)}`);
  line();
  line(
    "Each agent is started with its binary's pages dropped from the page cache (as a container starting from",
  );
  line(
    "its image; a freshly built, wholly cached binary gets far more of it mapped by the kernel's fault-around).",
  );
  line(
    "Peak: VmHWM 3 s after Envoy is ready. Steady: VmRSS after 4 s idle, split into anonymous memory (heaps,",
  );
  line(
    "stacks) and file-backed pages (the executable's own code and data). Under load: 1,000 requests per second",
  );
  line(`through Envoy for 4 s. ${plural(footprint.rounds, "run")} each, alternating. MiB.`);
  line();
  line(
    "| agent | start-up peak | steady RSS | anon | file | RSS at 1k rps | agent CPU at 1k rps |",
  );
  line("|---|---|---|---|---|---|---|");
  for (const s of footprint.subjects) {
    line(
      `| ${s.label} | ${spread(s.peak_mib, (v) => fmt(v, 1))} | ${
        spread(s.rss_mib, (v) => fmt(v, 1))
      } | ${fmt(s.anon_mib.median, 1)} | ${fmt(s.file_mib.median, 1)} | ${
        s.load_rss_mib.n ? fmt(s.load_rss_mib.median, 1) : "–"
      } | ${s.load_cpu_pct.n ? `${fmt(s.load_cpu_pct.median, 1)} %` : "–"} |`,
    );
  }
  line();
  const sizes = footprint.sizes_mib;
  line(
    `Sizes: \`dist/lastcall\` ${fmt(sizes.lastcall, 1)} MiB (Node's own binary is ${
      fmt(sizes.node, 1)
    } MiB of it; the bundle ${fmt(sizes.bundle, 2)} MiB), Deno ${
      fmt(sizes.deno, 1)
    } MiB, Istio's agent ${fmt(sizes.istio_agent, 1)} MiB, Contour ${fmt(sizes.contour, 1)} MiB.`,
  );
  line();
  const groups = [{
    title: "",
    rows: footprint.subjects.map((s) => ({
      label: s.id,
      value: s.rss_mib.median,
      min: s.rss_mib.min,
      max: s.rss_mib.max,
      color: colorOf(s.id),
      note: `anon ${fmt(s.anon_mib.median, 1)}, peak ${fmt(s.peak_mib.median, 1)}`,
    })),
  }];
  line(
    chart(
      "footprint.svg",
      barChart(groups, {
        title: "Agent steady RSS (median, min–max)",
        unit: "MiB",
        goals: [{ value: 45, label: "45" }, { value: 60, label: "60" }],
        labelWidth: 140,
      }),
    ),
  );
  line();
  const lc = footprint.subjects.find((s) => s.id === "lastcall");
  const contour = footprint.subjects.find((s) => s.id === "contour");
  if (lc) {
    goals.push([
      "footprint: steady RSS ≤ Contour's shutdown-manager (45 MB)",
      lc.rss_mib.median <= (contour?.rss_mib.median ?? 45),
      `${fmt(lc.rss_mib.median, 1)} MiB vs ${
        fmt(contour?.rss_mib.median ?? 45, 1)
      } MiB (anonymous ${fmt(lc.anon_mib.median, 1)} vs ${fmt(contour?.anon_mib.median, 1)})`,
    ]);
    goals.push([
      "footprint: start-up peak ≤ 60 MB",
      lc.peak_mib.median <= 60,
      `${fmt(lc.peak_mib.median, 1)} MiB`,
    ]);
    if (contour && lc.rss_mib.median > contour.rss_mib.median) {
      notAhead.push(
        `footprint: lastcall's steady RSS (${
          fmt(lc.rss_mib.median, 1)
        } MiB) is above Contour's shutdown-manager (${
          fmt(contour.rss_mib.median, 1)
        } MiB) and Istio's agent code (${
          fmt(footprint.subjects.find((s) => s.id === "istio")?.rss_mib.median, 1)
        } MiB): most of it is the JavaScript runtime's own pages.`,
      );
    }
  }
  line("What dominates, and what was cut (measured while cutting, on this machine):");
  line(
    "- Node's `fetch` is undici: the agent's first admin call loaded undici's client and compiled its llhttp",
  );
  line(
    "  parser to WebAssembly, then tiered it up: +40 MiB at the start-up peak, +16 MiB steady (a bare",
  );
  line(
    "  `node` process: 44 → 84 MiB peak, 44 → 60 MiB steady). The Node builds now send the agent's loopback",
  );
  line(
    "  calls through `node:http` (`build/loopback-fetch.mjs`, injected by `build/bundle.mjs`): peak 97 → 72 MiB",
  );
  line("  with a warm binary, 59 MiB cold. Deno runs the sources with its own fetch.");
  line(
    "- The V8 heap is small (10–13 MiB after start, `--trace-gc`); V8 flags (`--max-semi-space-size=1`,",
  );
  line(
    "  `--no-opt`, `--single-threaded`) moved RSS by 1–3 MiB in trials, and Node 20's single executables",
  );
  line("  cannot bake flags in (`execArgv` in the SEA config needs Node ≥ 22), so none is used.");
  line(
    "- The rest is the runtime itself: a bare Node 20 process with `http`, `net`, `child_process` and `crypto`",
  );
  line(
    "  loaded is 43 MiB RSS (36 MiB of it the executable's pages); loading the web `Request`/`Response` classes",
  );
  line(
    "  (undici, which the status server's Hono adapter uses) adds 8 MiB. Lazy loading the Kubernetes commands",
  );
  line(
    "  would save little: they are 29 KiB of the 0.8 MiB bundle (yaml 253 KiB, commander 122 KiB, prom-client",
  );
  line("  with OpenTelemetry 146 KiB are all used by `run`).");
  line(
    "- The xDS proxy brought gRPC (`@grpc/grpc-js`, 1 MiB of code): in the agent's bundle, even never run, it",
  );
  line(
    "  cost 3–4 MiB (the single executable, Envoy ready, static config: 65 → 62 MiB once it left). It is now a",
  );
  line(
    "  bundle of its own (`dist/xds-proxy.cjs`, an asset of the single executable) loaded only when Envoy's",
  );
  line("  listeners come from a control plane.");
  line();
}

if (push) {
  line(`## The push itself (\`inflight-push.json\`)${quickNote(push)}`);
  line();
  line(
    "lastcall with a real Envoy (`--concurrency 2`, heartbeat 1 s, `--min-drain 0s`): three requests held",
  );
  line(
    "across SIGTERM and released together; from the client reading the last byte of the last response to",
  );
  line(
    `lastcall's decision (\`drain_wait_done\`, the pushed zero confirmed by a probe), to its \`envoy_quit_requested\``,
  );
  line(
    `(after a final pulled count and Envoy's answer to \`/quitquitquit\`) and to Envoy's process gone. ${
      plural(push.push_delay.trials, "trial")
    }:`,
  );
  line();
  line("| step | median | min | max |");
  line("|---|---|---|---|");
  const d = push.push_delay;
  for (
    const [label, s] of [["decision (push + probe)", d.decided_ms], [
      "quit requested (+ final count read)",
      d.quit_requested_ms,
    ], ["Envoy gone (+ Envoy's clean exit)", d.gone_ms]]
  ) {
    if (s) line(`| ${label} | ${s.median} ms | ${s.min} ms | ${s.max} ms |`);
  }
  line();
  const st = push.steady_state;
  line(
    `Steady state: ${
      fmt(st.requests)
    } sequential requests on one keep-alive connection made ${st.report_calls.envoy_agent_cluster_rq} report calls`,
  );
  line(
    `(${st.calls_per_request} per request: heartbeats only), counted by the agent (${st.report_calls.accepted_by_agent}), the filter (${st.report_calls.sent_by_filter}) and Envoy (${st.report_calls.envoy_agent_cluster_rq}).`,
  );
  line();
}

rolloutSection({ rollout, line, chart, notAhead, goals, quickNote });
startupSection({ startup, line });

// ---- closing note ----
line("## Goals");
line();
line("| goal | met | measured |");
line("|---|---|---|");
for (const [goal, met, measured] of goals) {
  line(`| ${goal} | ${met ? "yes" : "**no**"} | ${measured} |`);
}
line();
const tailGoal = goals.find(([goal]) => goal.startsWith("termination: tail median"));
if (tailGoal && !tailGoal[1] && push?.push_delay?.quit_requested_ms) {
  const d = push.push_delay;
  line(
    `The tail is three steps (\`inflight-push.json\`, medians): lastcall's decision after the last response (push, then a`,
  );
  line(
    `probe to confirm it) ${d.decided_ms.median} ms; its final count before the stop and \`/quitquitquit\`, ${
      d.quit_requested_ms.median - d.decided_ms.median
    } ms more; Envoy's clean`,
  );
  line(
    `exit after \`/quitquitquit\`, ${
      d.gone_ms.median - d.quit_requested_ms.median
    } ms more. Envoy's clean exit alone takes 20–40 ms here (after \`/quitquitquit\` or`,
  );
  line(
    "SIGTERM alike, 5–10 ms more with a wasm filter loaded; measured while writing this), which Contour's Envoy",
  );
  line(
    "pays too; Istio SIGKILLs Envoy instead. The final count is a pull the filter answers, not a `/stats` walk: section 1's",
  );
  line("workload on 5,000 clusters shows whether lastcall's share grows with Envoy's stats.");
  line();
}
line("## Where lastcall is not ahead");
line();
if (notAhead.length === 0) line("Nowhere in this run.");
for (const item of notAhead) line(`- ${item}`);
line();

writeFileSync(join(root, "docs/benchmarks.md"), `${out.join("\n")}\n`);
console.log(`report: docs/benchmarks.md, ${charts.map((c) => `docs/bench/${c}`).join(", ")}`);
