// Section 4 of docs/benchmarks.md for bench/report.mjs: each agent's memory and CPU at start-up
// and at rest (footprint.json).
import { barChart, colorOf, fmt, plural, spread } from "./report-lib.mjs";

/** Writes section 4 through `line`, draws its chart with `chart`, and pushes rows to `goals`. */
export function footprintSection({ footprint, line, chart, goals, notAhead, quickNote }) {
  if (!footprint) return;
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
