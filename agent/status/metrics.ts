// Prometheus exposition through prom-client: values are read from the agent's state at scrape.
import { Counter, Gauge, type LabelValues, Registry } from "prom-client";
import type { AgentState, Phase } from "../state.ts";
import type { XdsStatsSnapshot } from "../xds/stats.ts";
import type { DrainMetrics } from "../drain/drain-metrics.ts";

const PHASES: Phase[] = ["starting", "running", "restarting", "draining", "stopping", "stopped"];

/** What a scrape reads. */
export interface MetricsSource {
  state(): AgentState;
  /** Latest in-flight count reported by the filters of all live Envoys. */
  inflight(): number;
  /** Readiness as `/healthz/ready` would answer, without calling Envoy. */
  ready(): boolean;
  reports(): { accepted: number; stale: number; unknown: number; refused: number };
  /** Counters of the xDS proxies (agent/xds/). */
  xds?(): XdsStatsSnapshot;
  /** How drains ended, and the drains under way (drain-metrics.ts). */
  drains?: DrainMetrics;
}

/**
 * Creates the registry behind `GET /metrics`.
 *
 * @example
 * ```ts
 * const registry = createMetrics(source);
 * const text = await registry.metrics();
 * ```
 */
export function createMetrics(source: MetricsSource): Registry {
  const registry = new Registry();
  const gauge: MetricMaker = (name, help, collect, labelNames = []) =>
    void new Gauge({
      name,
      help,
      labelNames,
      registers: [registry],
      collect() {
        collect(this as Gauge);
      },
    });
  // A total read from the state at each scrape: typed `counter`, so rate() and increase() apply.
  const counter: MetricMaker = (name, help, collect, labelNames = []) =>
    void new Counter({
      name,
      help,
      labelNames,
      registers: [registry],
      collect() {
        this.reset();
        const set = (labels: LabelValues<string> | number, value = 0) =>
          typeof labels === "number" ? this.inc(labels) : this.inc(labels, value);
        collect({ set } as Setter);
      },
    });

  counter(
    "lastcall_envoy_restarts_total",
    "Crash restarts of Envoy since lastcall started",
    (g) => g.set(source.state().restarts),
  );
  counter(
    "lastcall_hot_restarts_total",
    "Hot restarts (new epochs) since lastcall started",
    (g) => g.set(source.state().hotRestarts),
  );
  counter(
    "lastcall_reloads_rejected_total",
    "Reloads refused because the new config did not validate",
    (g) => g.set(source.state().reloadsRejected),
  );
  gauge(
    "lastcall_envoy_epoch",
    "Hot-restart epoch of the current Envoy",
    (g) => g.set(source.state().current?.epoch ?? -1),
  );
  gauge(
    "lastcall_envoy_processes",
    "Live Envoy processes (hot-restart parents included)",
    (g) => g.set(source.state().epochs.length),
  );
  gauge("lastcall_phase", "1 for the agent's current phase", (g) => {
    const phase = source.state().phase;
    for (const p of PHASES) g.set({ phase: p }, p === phase ? 1 : 0);
  }, ["phase"]);
  gauge(
    "lastcall_ready",
    "1 when /healthz/ready answers 200",
    (g) => g.set(source.ready() ? 1 : 0),
  );
  gauge(
    "lastcall_inflight_requests",
    "Requests in flight in Envoy, as the filter last reported",
    (g) => g.set(source.inflight()),
  );
  counter(
    "lastcall_filter_reports_total",
    "Filter reports accepted",
    (g) => g.set(source.reports().accepted),
  );
  counter(
    "lastcall_filter_stale_reports_total",
    "Filter probe answers ignored: older than one already seen, or to a probe never issued",
    (g) => g.set(source.reports().stale),
  );
  counter(
    "lastcall_filter_unknown_reports_total",
    "Reports naming no live Envoy of this agent (answered, nothing kept)",
    (g) => g.set(source.reports().unknown),
  );
  counter(
    "lastcall_filter_refused_reports_total",
    "Reports refused for a missing or wrong token",
    (g) => g.set(source.reports().refused),
  );
  // The termination's outcome, set right before lastcall exits (see lastcall_drain_duration_seconds).
  gauge(
    "lastcall_drain_seconds",
    "Duration of the termination's drain, from signal to Envoy stop",
    (g) => {
      const t = source.state().termination;
      if (t) g.set(t.drainMs / 1000);
    },
  );
  gauge("lastcall_inflight_at_stop", "Requests still in flight when Envoy was stopped", (g) => {
    const t = source.state().termination;
    if (t) g.set(t.inflightAtStop);
  });
  gauge("lastcall_termination", "1 for the reason the termination's drain ended", (g) => {
    const t = source.state().termination;
    if (t) g.set({ reason: t.reason, mode: t.mode }, 1);
  }, ["reason", "mode"]);
  source.drains?.register(registry);
  if (source.xds) addXdsMetrics(gauge, counter, source.xds);
  return registry;
}

/** What a metric's collect callback sets: a gauge's value, or a counter's total. */
type Setter = Pick<Gauge, "set">;

type MetricMaker = (
  name: string,
  help: string,
  collect: (s: Setter) => void,
  labelNames?: string[],
) => void;

function addXdsMetrics(gauge: MetricMaker, counter: MetricMaker, xds: () => XdsStatsSnapshot) {
  gauge(
    "lastcall_xds_streams",
    "xDS streams Envoy has open to lastcall's proxy",
    (g) => g.set(xds().streamsActive),
  );
  counter(
    "lastcall_xds_streams_total",
    "xDS streams Envoy opened to lastcall's proxy",
    (g) => g.set(xds().streamsTotal),
  );
  counter(
    "lastcall_xds_responses_total",
    "xDS responses relayed to Envoy, by resource type",
    (g) => {
      for (const [type, n] of Object.entries(xds().responses)) g.set({ type }, n);
    },
    ["type"],
  );
  counter(
    "lastcall_xds_listeners_rewritten_total",
    "Listeners from LDS (gRPC or file) that got the filter",
    (g) => g.set(xds().listenersRewritten),
  );
  counter(
    "lastcall_xds_nacks_total",
    "NACKs from Envoy; cause lastcall when the rejected change was lastcall's",
    (g) => {
      const n = xds().nacks;
      g.set({ cause: "lastcall" }, n.lastcall);
      g.set({ cause: "control_plane" }, n.control_plane);
    },
    ["cause"],
  );
  counter(
    "lastcall_xds_upstream_errors_total",
    "Relayed xDS streams the control plane ended with an error or never took",
    (g) => g.set(xds().upstreamErrors),
  );
}
