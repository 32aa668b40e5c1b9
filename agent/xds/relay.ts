// One xDS stream, relayed to the control plane unchanged, except Listener resources, which get the
// filter.
import * as grpc from "@grpc/grpc-js";
import type { EventLog } from "../lib/log.ts";
import type { EncodedFilters, ListenerRewrite } from "./listener.ts";
import { LISTENER_TYPE, rewriteResponse, summarizeRequest, type Variant } from "./messages.ts";
import { XDS_TOKEN_HEADER, type XdsUpstream } from "./redirect.ts";
import type { XdsStats } from "./stats.ts";
import { upstreamChannel } from "./upstream.ts";

/** The xDS methods lastcall serves: ADS and LDS, state of the world and delta. */
export const XDS_METHODS: Record<
  string,
  { path: string; variant: Variant; service: "ADS" | "LDS" }
> = {
  StreamAggregatedResources: {
    path: "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources",
    variant: "sotw",
    service: "ADS",
  },
  DeltaAggregatedResources: {
    path: "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources",
    variant: "delta",
    service: "ADS",
  },
  StreamListeners: {
    path: "/envoy.service.listener.v3.ListenerDiscoveryService/StreamListeners",
    variant: "sotw",
    service: "LDS",
  },
  DeltaListeners: {
    path: "/envoy.service.listener.v3.ListenerDiscoveryService/DeltaListeners",
    variant: "delta",
    service: "LDS",
  },
};

/** What every relayed stream of one proxy shares. */
export interface RelayContext {
  upstream: XdsUpstream;
  filters: EncodedFilters;
  stats: XdsStats;
  log: EventLog;
  /** Called with the listeners of each Listener response after the rewrite. */
  onListeners(listeners: ListenerRewrite[]): void;
}

const identity = (b: Buffer) => b;
/** A NACK whose reason names the filter is blamed on lastcall's change. */
const OURS = /lastcall|wasm/i;

/**
 * Relays one stream of Envoy's to the control plane until either side ends it.
 *
 * @example
 * ```ts
 * server.addService(definition, { StreamAggregatedResources: (call) => relayStream(call, XDS_METHODS.StreamAggregatedResources, context) });
 * ```
 */
export function relayStream(
  down: grpc.ServerDuplexStream<Buffer, Buffer>,
  method: (typeof XDS_METHODS)[string],
  context: RelayContext,
): void {
  const { stats, log } = context;
  const metadata = down.metadata.clone();
  metadata.remove(XDS_TOKEN_HEADER);
  stats.streamsActive++;
  stats.streamsTotal++;
  let done = false;
  let up: grpc.ClientDuplexStream<Buffer, Buffer> | undefined;
  let client: grpc.Client | undefined;
  /** Nonces of Listener responses that carried lastcall's change. */
  const changed = new Set<string>();
  const finish = (status?: Partial<grpc.StatusObject>) => {
    if (done) return;
    done = true;
    stats.streamsActive--;
    up?.cancel();
    client?.close();
    if (!status || status.code === grpc.status.OK) down.end();
    else {down.emit("error", {
        code: status.code,
        details: status.details ?? "",
        metadata: status.metadata ?? new grpc.Metadata(),
      });}
  };
  down.on("cancelled", () => finish());
  down.on("error", () => finish());

  void upstreamChannel(context.upstream).then((channel) => {
    if (done) return;
    client = new grpc.Client(channel.target, channel.credentials, channel.options);
    up = client.makeBidiStreamRequest(method.path, identity, identity, metadata);
    up.on("data", (message: Buffer) => {
      let out: Uint8Array = message;
      try {
        const rewrite = rewriteResponse(message, method.variant, context.filters);
        out = rewrite.bytes;
        stats.response(rewrite.typeUrl);
        if (rewrite.typeUrl === LISTENER_TYPE) {
          const filtered = rewrite.listeners.filter((l) => l.http + l.tcp > 0);
          stats.listenersRewritten += filtered.length;
          if (filtered.length > 0 || rewrite.listeners.some((l) => l.marked)) {
            changed.add(rewrite.nonce);
          }
          log("xds_listeners", {
            service: method.service,
            variant: method.variant,
            nonce: rewrite.nonce,
            listeners: rewrite.listeners.map((l) => l.name),
            filtered: filtered.map((l) => l.name),
            counted: rewrite.listeners.map((l) => ({
              name: l.name,
              direction: l.direction,
              counted: l.counted,
              delivery: l.delivery,
            })),
          });
          context.onListeners(rewrite.listeners);
        }
      } catch (error) {
        // Not protobuf lastcall can walk: Envoy gets it as it came and judges it itself.
        log("xds_response_unparsed", { service: method.service, error: (error as Error).message });
      }
      down.write(Buffer.from(out.buffer, out.byteOffset, out.byteLength));
    });
    up.on("error", () => {}); // reported through "status"
    up.on("status", (status: grpc.StatusObject) => {
      if (status.code !== grpc.status.OK && !done) {
        stats.upstreamErrors++;
        log("xds_upstream_ended", {
          service: method.service,
          upstream: context.upstream.name,
          code: grpc.status[status.code],
          details: status.details,
        });
      }
      finish(status);
    });
    down.on("data", (message: Buffer) => {
      try {
        const request = summarizeRequest(message, method.variant);
        if (request.error) {
          const cause = changed.has(request.responseNonce) && OURS.test(request.error.message)
            ? "lastcall"
            : "control_plane";
          stats.nacks[cause]++;
          log("xds_nack", {
            service: method.service,
            type_url: request.typeUrl,
            nonce: request.responseNonce,
            cause,
            message: request.error.message.slice(0, 2000),
          });
        }
      } catch { /* passed on as it came */ }
      up!.write(message);
    });
    down.on("end", () => up?.end());
  }).catch((error: Error) => {
    stats.upstreamErrors++;
    log("xds_upstream_failed", {
      service: method.service,
      upstream: context.upstream.name,
      error: error.message,
    });
    finish({
      code: grpc.status.UNAVAILABLE,
      details: `lastcall: cannot reach the control plane: ${error.message}`,
    });
  });
}

/** The service definition of {@linkcode XDS_METHODS}, bytes in and out (no schema). */
export function xdsServiceDefinition(): grpc.ServiceDefinition {
  const definition: Record<string, grpc.MethodDefinition<Buffer, Buffer>> = {};
  for (const [name, m] of Object.entries(XDS_METHODS)) {
    definition[name] = {
      path: m.path,
      requestStream: true,
      responseStream: true,
      originalName: name,
      requestSerialize: identity,
      requestDeserialize: identity,
      responseSerialize: identity,
      responseDeserialize: identity,
    };
  }
  return definition;
}
