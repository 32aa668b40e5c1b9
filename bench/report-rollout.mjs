// The "Rollout on a real kubelet" section of docs/benchmarks.md (bench/results/rollout.json,
// written by bench/rollout.ts), with its chart docs/bench/rollout.svg.
import { barChart, colorOf, fmt, plural, spread } from "./report-lib.mjs";
import { median, relistsTable, stepsTable } from "./report-rollout-steps.mjs";

const seconds = (v) => `${fmt(v / 1000, 1)} s`;
const rate = (c) => (c.sent ? c.failed_total / c.sent : Number.NaN);
const pct = (c) => `${fmt(rate(c) * 100, 2)} %`;
/** Each failed request of a contender's runs of `workload`, with where it went: "terminating", "elsewhere" or "unknown". */
function placed(rollout, workload, id) {
  const runs = rollout.runs.filter((r) => r.workload === workload && r.contender === id);
  return runs.flatMap((r) =>
    r.load.first_failures.map((f) => ({
      f,
      where: !f.pod
        ? "unknown"
        : r.pods.some((p) => p.pod === f.pod && f.at_ms >= p.deleted_at_ms)
        ? "terminating"
        : "elsewhere",
    }))
  );
}

/**
 * Failed requests that reached an old pod after its deletion (conntrack's pod for the client's
 * port, see bench/lib/rollout-run.ts), as "n of m attributed"; "–" when none could be attributed.
 */
function atTerminating(rollout, workload, id) {
  const all = placed(rollout, workload, id);
  const attributed = all.filter((x) => x.where !== "unknown");
  if (attributed.length === 0) return all.length ? "–" : "0";
  return `${attributed.filter((x) => x.where === "terminating").length} of ${attributed.length}`;
}

/** Failed requests the termination may have caused: at a terminating pod, or not attributed. */
function terminationRate(rollout, workload, c) {
  const n = placed(rollout, workload, c.id).filter((x) => x.where !== "elsewhere").length;
  return { n, rate: c.sent ? n / c.sent : Number.NaN };
}

/** An incumbent's contender (not lastcall's, not the native floor). */
const isIncumbent = (c) => !c.id.startsWith("lastcall") && c.id !== "native-floor";

const CLASSES = ["refused", "reset", "5xx", "truncated", "timeout", "other"];

/**
 * Writes the section through `line` and `chart`; adds to `notAhead` where lastcall is not ahead.
 *
 * @example
 * rolloutSection({ rollout, line, chart, notAhead, goals, quickNote });
 */
export function rolloutSection({ rollout, line, chart, notAhead, goals, quickNote }) {
  if (!rollout) return;
  const load = rollout.load;
  line(
    `## Rollout on a real kubelet (\`rollout.json\`)${quickNote(rollout)}${
      rollout.complete === false ? ` **(cut short: ${rollout.runs.length} runs measured)**` : ""
    }`,
  );
  line();
  line(
    "A single-node Kubernetes v1.34.4 built here (`test/support/kube.ts`: kubelet, kube-proxy in iptables mode,",
  );
  line(
    "containerd 1.6, runc; `node build/kube.mjs` builds the binaries, the run needs root). The demo app",
  );
  line(
    `(\`examples/k8s/pod-demo.yaml\`) as a ${rollout.replicas}-replica Deployment behind a Service, each pod with`,
  );
  line(
    `\`terminationGracePeriodSeconds: ${rollout.grace_s}\`, the same Envoy 1.40 binary and the same listener and cluster; the`,
  );
  line("app's preStop is the workload's (below). A client on the node");
  line(
    `sends through the Service's ClusterIP at a constant rate: ${load.keepAlivePerSecond}/s on 4 keep-alive connections,`,
  );
  line(
    `${load.newConnectionPerSecond}/s each on a new connection, a ${
      fmt(load.longMs / 1000, 0)
    } s request every ${load.longEveryMs} ms, and a slow reader every`,
  );
  line(
    `${fmt(load.slowEveryMs / 1000, 0)} s (${load.slowMb} MB read at ${
      fmt(load.slowBytesPerSecond / 1e6, 0)
    } MB/s). Then \`kubectl rollout restart\` and \`kubectl rollout`,
  );
  line(
    "status\`; the client stops once every old pod is gone. Every answer must be a 200 with the whole body.",
  );
  line(
    `${
      plural(rollout.rounds, "round")
    }; contenders alternate within a round. Every run is in the JSON.`,
  );
  const delays = [...new Set(rollout.runs.map((r) => r.restart_delay_ms ?? 0))].sort((a, b) =>
    a - b
  );
  if (delays.some((ms) => ms > 0)) {
    line(
      `In round r the restart is sent r/rounds of the kubelet's relist period after a relist (${
        delays.join(", ")
      } ms after it): the kubelet`,
    );
    line(
      "relists about every second, and a new pod's Ready depends on where its start falls between relists. The",
    );
    line(
      "relist is placed by the initial pods' first Ready on the watch (a probe a few ms after a relist), so every",
    );
    line(
      `contender's first new pods meet the same ${delays.length} phases, whatever its warm-up took.`,
    );
  }
  line();
  line(
    "- failed: requests without a whole 200, of all sent (runs last as long as the rollout and the old pods'",
  );
  line(
    "  ends, so contenders send different numbers; the rate is what compares): refused (connection refused),",
  );
  line(
    "  reset (connection reset or closed before an answer), 5xx, truncated (a 200 whose body ended short), timeout;",
  );
  line("- rollout: `kubectl rollout restart` → `kubectl rollout status` returned;");
  line(
    "- new pod Ready: a new pod's creation → its Ready condition, both seen on the API watch (median over every",
  );
  line("  new pod); the rollout replaces one pod at a time and waits for each new one;");
  line(
    "- pod termination: an old pod's deletion seen on the API watch → its object gone (median over every old",
  );
  line(
    "  pod of every round); × lastcall native: the median's ratio to lastcall native's. Many fall near whole",
  );
  line("  seconds: the kubelet acts on a terminating pod on its ~1 s sync;");
  line(
    "- at a terminating pod: of the failed requests whose pod was found (conntrack's entry for the client's",
  );
  line(
    "  port gives the pod the Service sent it to), those that reached an old pod after its deletion;",
  );
  line("- SIGKILLed containers: containers of old pods that ended with exit code 137.");
  line();
  line(
    "Pod shapes (each project's own; only the grace period, images and the Envoy bootstrap's listener are set):",
  );
  line();
  for (const c of rollout.summary[0]?.contenders ?? []) line(`- **${c.label}**: ${c.shape}.`);
  for (const l of rollout.left_out ?? []) line(`- **${l.id}**: left out: ${l.why}.`);
  line();
  line(
    "Not reproduced: Istio's injector on a node of Kubernetes ≥ 1.33 (`ENABLE_NATIVE_SIDECARS=auto`) makes",
  );
  line(
    "`istio-proxy` a native sidecar with preStop `pilot-agent request POST drain`; the Istio contenders here run",
  );
  line(
    "Istio's agent code (`pkg/envoy`) without pilot-agent's status server, so in the container layout. The",
  );
  line(
    "incumbents' own readiness endpoints (Contour's :8002, Envoy Gateway's :19003 listeners, Istio's :15021) are",
  );
  line(
    "not in the shared bootstrap: an incumbent's pod is Ready when the app answers through Envoy (the app's probe on",
  );
  line(
    ":10000), with no readiness probe of the proxy's own. lastcall's have inject's: native, the app's own probe sent",
  );
  line(
    "to Envoy's listener (as the incumbents'), and no sidecar probe; classic, the sidecar's readiness (`/healthz/ready`,",
  );
  line(
    "Envoy LIVE) and the app's own probe (to the app), both must pass: its share of the Ready gap.",
  );
  line(
    "Each run's `first_failures` in the JSON has, per failed request, the pod it reached and when.",
  );
  line();
  for (const workload of rollout.summary) {
    line(`**Workload \`${workload.workload}\`**: ${workload.what}.`);
    line();
    line(
      "| contender | failed (all runs) | failed rate | at a terminating pod | refused / reset / 5xx / truncated / timeout | rollout | new pod Ready | pod termination | × lastcall native (rollout; termination) | SIGKILLed containers |",
    );
    line("|---|---|---|---|---|---|---|---|---|---|");
    for (const c of workload.contenders) {
      const classes = CLASSES.slice(0, 5).map((k) => c.failed_by_class[k] ?? 0).join(" / ");
      const ratio = c.vs_lastcall_native
        ? `×${fmt(c.vs_lastcall_native.rollout, 2)}; ×${fmt(c.vs_lastcall_native.termination, 2)}`
        : "–";
      line(
        `| ${c.label} | ${c.failed_total} of ${fmt(c.sent)} | ${pct(c)} | ${
          atTerminating(rollout, workload.workload, c.id)
        } | ${classes} | ${spread(c.rollout_ms, seconds)} | ${
          c.new_pod_ready_ms?.n ? spread(c.new_pod_ready_ms, seconds) : "–"
        } | ${spread(c.termination_ms, seconds)} | ${ratio} | ${c.sigkilled_containers} |`,
      );
    }
    line();
  }
  stepsTable({ rollout, line });
  relistsTable({ rollout, line });
  line(
    "lastcall's default output holds no app for its proxy (`inject --hold-app auto`: the generated config only",
  );
  line(
    "serves inbound, so the pod is not Ready before Envoy is anyway): the app starts beside the sidecar. The",
  );
  line(
    "native floor is the same app with a native sidecar that only sleeps: what Kubernetes' own ordering costs.",
  );
  line();
  if (rollout.errors?.length) {
    line(
      `**${rollout.errors.length} run(s) could not be measured**; their errors are in the JSON.\n`,
    );
  }
  const groups = rollout.summary.map((w) => ({
    title: `${w.workload}: pod termination (deletion → gone)`,
    rows: w.contenders.map((c) => ({
      label: c.id,
      value: c.termination_ms.median / 1000,
      min: c.termination_ms.min / 1000,
      max: c.termination_ms.max / 1000,
      color: colorOf(c.id),
      note: `rollout ${seconds(c.rollout_ms.median)}, ${pct(c)} failed`,
    })),
  }));
  line(
    chart(
      "rollout.svg",
      barChart(groups, {
        title: "kubectl rollout restart on a real kubelet: old pods' termination (median, min–max)",
        unit: "seconds",
        goals: [{ value: rollout.grace_s, label: "grace" }],
        labelWidth: 200,
      }),
    ),
  );
  line();
  const elsewhere = rollout.summary.flatMap((w) =>
    w.contenders.flatMap((c) => placed(rollout, w.workload, c.id))
  ).filter((x) => x.where === "elsewhere");
  if (elsewhere.length) {
    const kinds = [...new Set(elsewhere.map((x) => `${x.f.class} (${x.f.kind})`))].join(", ");
    line(
      `${elsewhere.length} failed request(s) reached a pod that was not terminating (a new pod, or an old one before its`,
    );
    line(
      `deletion): ${kinds}. They are in the counts above but not in "at a terminating pod"; their cause was not found`,
    );
    line("(the client alone, against the demo app on loopback, reads every slow response whole).");
    line();
  }
  for (const w of rollout.summary) {
    for (const mine of w.contenders.filter((c) => c.id.startsWith("lastcall"))) {
      const m = terminationRate(rollout, w.workload, mine);
      for (const other of w.contenders.filter(isIncumbent)) {
        const o = terminationRate(rollout, w.workload, other);
        if (o.rate < m.rate) {
          notAhead.push(
            `rollout on a real kubelet, workload \`${w.workload}\`: ${other.label} lost a smaller share of requests at its terminating pods than ${mine.label} (${o.n} of ${
              fmt(other.sent)
            } vs ${m.n} of ${fmt(mine.sent)}).`,
          );
        } else if (
          o.n === 0 && m.n === 0 && other.termination_ms.median < 0.95 * mine.termination_ms.median
        ) {
          notAhead.push(
            `rollout on a real kubelet, workload \`${w.workload}\`: ${other.label} ended its pods sooner than ${mine.label} (${
              seconds(other.termination_ms.median)
            } vs ${seconds(mine.termination_ms.median)}), also without losing a request at them.`,
          );
        }
      }
      const faster = w.contenders.filter((c) =>
        isIncumbent(c) && c.rollout_ms.median < 0.8 * mine.rollout_ms.median
      );
      const ready = (
        c,
      ) => (c.new_pod_ready_ms?.n
        ? `, new pods Ready in ${seconds(c.new_pod_ready_ms.median)}`
        : "");
      if (faster.length) {
        notAhead.push(
          `rollout on a real kubelet, workload \`${w.workload}\`: the rollout took longer with ${mine.label} (${
            seconds(mine.rollout_ms.median)
          }${ready(mine)}) than with ${
            faster.map((c) => `${c.label} (${seconds(c.rollout_ms.median)}${ready(c)})`).join(", ")
          }.`,
        );
      }
    }
  }
  rolloutGoals(rollout, goals);
}

/**
 * The rollout's goals: lastcall loses nothing in every workload; classic rolls within 1.1× the
 * fastest incumbent, native within 1.1× the native floor; new pods Ready no later than the
 * incumbents' median (native: or the floor + 0.3 s).
 */
function rolloutGoals(rollout, goals) {
  const twoPlaces = (v) => `${fmt(v / 1000, 2)} s`;
  for (const w of rollout.summary) {
    const byId = Object.fromEntries(w.contenders.map((c) => [c.id, c]));
    const incumbents = w.contenders.filter(isIncumbent);
    const floor = byId["native-floor"];
    for (const mode of ["native", "classic"]) {
      const c = byId[`lastcall-${mode}`];
      if (!c) continue;
      goals.push([
        `rollout \`${w.workload}\`: lastcall ${mode} 0 failed requests, every round`,
        c.failed_total === 0,
        `${c.failed_total} of ${fmt(c.sent)} in ${plural(c.runs, "round")}`,
      ]);
      const fastest = incumbents.length
        ? incumbents.reduce((a, b) => (b.rollout_ms.median < a.rollout_ms.median ? b : a))
        : undefined;
      const base = mode === "classic" ? fastest : floor;
      if (base) {
        const ratio = c.rollout_ms.median / base.rollout_ms.median;
        goals.push([
          `rollout \`${w.workload}\`: lastcall ${mode}'s rollout ≤ 1.1× ${
            mode === "classic" ? "the fastest incumbent's" : "the native floor's"
          }`,
          ratio <= 1.1,
          `×${fmt(ratio, 2)}: ${seconds(c.rollout_ms.median)} vs ${
            seconds(base.rollout_ms.median)
          } (${base.label})`,
        ]);
      }
      const incumbentMedian = median(incumbents.map((i) => i.new_pod_ready_ms.median));
      const ready = c.new_pod_ready_ms.median;
      const floorReady = floor?.new_pod_ready_ms?.median;
      const met = ready <= incumbentMedian ||
        (mode === "native" && floorReady !== undefined && ready <= floorReady + 300);
      goals.push([
        `rollout \`${w.workload}\`: lastcall ${mode}'s new pod Ready ≤ the incumbents' median${
          mode === "native" ? " or the native floor + 0.3 s" : ""
        }`,
        met,
        `${twoPlaces(ready)} vs ${twoPlaces(incumbentMedian)}${
          mode === "native" && floorReady !== undefined ? ` (floor ${twoPlaces(floorReady)})` : ""
        }`,
      ]);
    }
  }
}

/** "Pod start on a real kubelet": creation → Ready medians from startup.json (bench/startup.ts). */
export function startupSection({ startup, line }) {
  if (!startup) return;
  const floor = startup.medians_ms["native floor (sleep sidecar)"];
  const bare = startup.medians_ms.bare;
  line("## Pod start on a real kubelet (`startup.json`)");
  line();
  line(
    `One app pod (\`bench/startup.ts\`), created ${startup.rounds} times each way on the single-node Kubernetes`,
  );
  line(
    `${startup.kubernetes}; from the API's creation to its Ready condition, median (and every run). The native floor is`,
  );
  line(
    "the same pod with a native sidecar that only sleeps (no probes): what Kubernetes' own ordering costs.",
  );
  line();
  line("| pod | median | against bare | against the native floor | runs (ms) |");
  line("|---|---:|---:|---:|---|");
  for (const [name, median] of Object.entries(startup.medians_ms)) {
    const delta = (base) =>
      `${median - base >= 0 ? "+" : "−"}${fmt(Math.abs(median - base) / 1000, 2)} s`;
    line(
      `| ${name} | ${fmt(median / 1000, 2)} s | ${delta(bare)} | ${delta(floor)} | ${
        startup.ms[name].join(", ")
      } |`,
    );
  }
  line();
}
