// Counters of the xDS proxies of one agent (every Envoy process's proxy adds to the same
// counters), read by /metrics as `lastcall_xds_*`.

/** A copy of the counters at one moment. */
export interface XdsStatsSnapshot {
  /** Streams Envoy has open to lastcall's proxies now. */
  streamsActive: number;
  /** Streams Envoy opened to lastcall's proxies since start. */
  streamsTotal: number;
  /** Responses relayed to Envoy, by resource type (`Listener`, `Cluster`, …). */
  responses: Record<string, number>;
  /** Listeners that got the filter (a listener sent twice counts twice). */
  listenersRewritten: number;
  /** NACKs from Envoy: `lastcall` when the rejected response carried lastcall's change and the reason names it. */
  nacks: { lastcall: number; control_plane: number };
  /** Upstream streams that ended with an error (control plane unreachable, restarted, refused). */
  upstreamErrors: number;
  /** Listener files rewritten. */
  filesWritten: number;
}

/** The mutable counters; one per agent. */
export class XdsStats {
  streamsActive = 0;
  streamsTotal = 0;
  readonly responses = new Map<string, number>();
  listenersRewritten = 0;
  readonly nacks = { lastcall: 0, control_plane: 0 };
  upstreamErrors = 0;
  filesWritten = 0;

  /** Counts one relayed response of `typeUrl`. */
  response(typeUrl: string): void {
    const type = typeUrl.slice(typeUrl.lastIndexOf(".") + 1) || "unknown";
    this.responses.set(type, (this.responses.get(type) ?? 0) + 1);
  }

  /** A plain copy, for metrics and tests. */
  snapshot(): XdsStatsSnapshot {
    return {
      streamsActive: this.streamsActive,
      streamsTotal: this.streamsTotal,
      responses: Object.fromEntries(this.responses),
      listenersRewritten: this.listenersRewritten,
      nacks: { ...this.nacks },
      upstreamErrors: this.upstreamErrors,
      filesWritten: this.filesWritten,
    };
  }
}
