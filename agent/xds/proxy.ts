// The xDS proxy of one Envoy process: a gRPC server on a Unix socket in the run folder that
// relays Envoy's ADS/LDS streams to the control plane, and the rewritten copies of listener
// files. One per Envoy process, so the filter it inserts carries that process's instance id.
import { rm } from "node:fs/promises";
import * as grpc from "@grpc/grpc-js";
import type { EventLog } from "../lib/log.ts";
import { encodeFilter } from "./encode-filter.ts";
import { relayFile } from "./file-lds.ts";
import type { EncodedFilters } from "./listener.ts";
import { XDS_TOKEN_HEADER, type XdsPlan } from "./redirect.ts";
import { relayStream, XDS_METHODS, xdsServiceDefinition } from "./relay.ts";
import type { XdsStats } from "./stats.ts";

/** Options of {@linkcode startXdsProxy}. */
export interface XdsProxyOptions {
  plan: XdsPlan;
  stats: XdsStats;
  log: EventLog;
  /** Called when a listener got the filter's HTTP or TCP variant (its reports are then expected). */
  onFilter(variant: "http" | "tcp"): void;
}

/** A running proxy. */
export interface XdsProxy {
  /** Ends every stream, stops following files, removes the socket. */
  close(): Promise<void>;
}

/** The filters of a plan as protobuf. @throws {FilterEncodingError} */
export function encodeFilters(plan: XdsPlan): EncodedFilters {
  return {
    http: encodeFilter(plan.filters.http),
    httpName: String(plan.filters.http.name),
    tcp: encodeFilter(plan.filters.tcp),
    tcpName: String(plan.filters.tcp.name),
  };
}

/**
 * Starts serving the plan's xDS streams and files; resolves once Envoy can connect and the
 * first file copies are written.
 *
 * @example
 * ```ts
 * const proxy = await startXdsProxy({ plan: bootstrap.xds, stats, log, onFilter: (v) => expect(v) });
 * await proxy.close();
 * ```
 */
export async function startXdsProxy(options: XdsProxyOptions): Promise<XdsProxy> {
  const { plan, stats, log } = options;
  const encoded = encodeFilters(plan);
  const onListeners = (listeners: Array<{ http: number; tcp: number }>) => {
    if (listeners.some((l) => l.http > 0)) options.onFilter("http");
    if (listeners.some((l) => l.tcp > 0)) options.onFilter("tcp");
  };
  const stops: Array<() => void> = [];
  let server: grpc.Server | undefined;
  try {
    for (const file of plan.files) {
      stops.push(
        await relayFile(file, { filters: plan.filters, encoded, stats, log, onListeners }),
      );
    }
    if (plan.upstream) {
      const upstream = plan.upstream;
      server = new grpc.Server({
        "grpc.max_receive_message_length": -1,
        "grpc.max_send_message_length": -1,
      });
      const handlers: grpc.UntypedServiceImplementation = {};
      for (const [name, method] of Object.entries(XDS_METHODS)) {
        handlers[name] = (call: grpc.ServerDuplexStream<Buffer, Buffer>) => {
          if (call.metadata.get(XDS_TOKEN_HEADER)[0] !== plan.token) {
            call.emit("error", {
              code: grpc.status.PERMISSION_DENIED,
              details: "lastcall: not this Envoy's xDS stream",
            });
            return;
          }
          relayStream(call, method, { upstream, filters: encoded, stats, log, onListeners });
        };
      }
      server.addService(xdsServiceDefinition(), handlers);
      await rm(plan.socketPath, { force: true });
      await new Promise<void>((resolve, reject) => {
        server!.bindAsync(
          `unix:${plan.socketPath}`,
          grpc.ServerCredentials.createInsecure(),
          (error) => (error ? reject(error) : resolve()),
        );
      });
    }
  } catch (error) {
    for (const stop of stops) stop();
    server?.forceShutdown();
    throw error;
  }
  return {
    async close() {
      for (const stop of stops) stop();
      server?.forceShutdown();
      if (server) await rm(plan.socketPath, { force: true }).catch(() => {});
    },
  };
}
