// Sections of docs/benchmarks.md for bench/report.mjs on the termination: the side-by-side run
// (termination.json), the push from the filter (inflight-push.json), and what makes up the tail.
import { barChart, colorOf, fmt, ms, plural, spread } from "./report-lib.mjs";

/**
 * Writes section 1 through `line`, draws its charts with `chart`, and pushes `[goal, met,
 * measured]` rows to `goals` and sentences to `notAhead`.
 */
export function terminationSection({ termination, line, chart, goals, notAhead, quickNote }) {
  if (!termination) return;
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

/** Writes the section on the push itself (inflight-push.json) through `line`. */
export function pushSection({ push, line, quickNote }) {
  if (!push) return;
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

/** After the goals: where the termination's tail goes, when its goal was missed. */
export function tailNote({ push, line, goals }) {
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
}
