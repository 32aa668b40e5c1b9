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
import { footprintSection } from "./report-footprint.mjs";
import { fmt } from "./report-lib.mjs";
import { pollingSection } from "./report-polling.mjs";
import { rolloutSection, startupSection } from "./report-rollout.mjs";
import { pushSection, tailNote, terminationSection } from "./report-termination.mjs";

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
terminationSection({ termination, line, chart, goals, notAhead, quickNote });

// ---- 2. polling ----
pollingSection({ polling, line, chart, notAhead, quickNote });

// ---- 3. filter load and cost ----
filterSections({ filterLoad, filterCost, line, chart, goals, quickNote });

// ---- 4. footprint ----
footprintSection({ footprint, line, chart, goals, notAhead, quickNote });
pushSection({ push, line, quickNote });

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
tailNote({ push, line, goals });
line("## Where lastcall is not ahead");
line();
if (notAhead.length === 0) line("Nowhere in this run.");
for (const item of notAhead) line(`- ${item}`);
line();

writeFileSync(join(root, "docs/benchmarks.md"), `${out.join("\n")}\n`);
console.log(`report: docs/benchmarks.md, ${charts.map((c) => `docs/bench/${c}`).join(", ")}`);
