// The xDS envelope at the wire level: DiscoveryResponse and DeltaDiscoveryResponse with their
// Listener resources rewritten (listener.ts), and what the proxy reads of requests (type, nonce,
// NACK). Everything else of a message passes unchanged.
import { type EncodedFilters, type ListenerRewrite, rewriteListener } from "./listener.ts";
import { concat, lenField, readFields, stringOf, text, WIRE, type WireField } from "./wire.ts";

/** `type_url` of Listener resources. */
export const LISTENER_TYPE = "type.googleapis.com/envoy.config.listener.v3.Listener";
/** An Any of this type wraps a resource with a TTL (`envoy.service.discovery.v3.Resource`). */
const RESOURCE_TYPE = "type.googleapis.com/envoy.service.discovery.v3.Resource";

/** Field numbers of envoy/service/discovery/v3/discovery.proto and google/rpc/status.proto. */
const F = {
  response: { resources: 2, typeUrl: 4, nonce: 5 },
  deltaResponse: { resources: 2, typeUrl: 4, nonce: 5 },
  resource: { resource: 2 },
  any: { typeUrl: 1, value: 2 },
  request: { versionInfo: 1, typeUrl: 4, responseNonce: 5, errorDetail: 6 },
  deltaRequest: { typeUrl: 2, responseNonce: 6, errorDetail: 7 },
  status: { code: 1, message: 2 },
} as const;

/** SotW (`DiscoveryRequest`/`DiscoveryResponse`) or delta (`Delta…`). */
export type Variant = "sotw" | "delta";

/** A response after the rewrite. */
export interface ResponseRewrite {
  bytes: Uint8Array;
  typeUrl: string;
  nonce: string;
  /** Listeners the filter was inserted into. */
  listeners: ListenerRewrite[];
}

const isLen = (f: WireField, n: number) => f.number === n && f.wireType === WIRE.len;

/** Rewrites an Any holding a Listener (or a Resource wrapping one); undefined when unchanged. */
function rewriteAny(
  bytes: Uint8Array,
  filters: EncodedFilters,
  found: ListenerRewrite[],
): Uint8Array | undefined {
  const fields = readFields(bytes);
  const typeUrl = stringOf(fields, F.any.typeUrl);
  const value = fields.find((f) => isLen(f, F.any.value));
  if (!value) return undefined;
  let inner: Uint8Array | undefined;
  if (typeUrl === LISTENER_TYPE) {
    const rewrite = rewriteListener(value.value, filters);
    found.push(rewrite);
    if (rewrite.bytes !== value.value) inner = rewrite.bytes; // a filter inserted, or marked INBOUND
  } else if (typeUrl === RESOURCE_TYPE) {
    inner = rewriteResource(value.value, filters, found);
  }
  if (!inner) return undefined;
  return concat(fields.map((f) => (f === value ? lenField(F.any.value, inner!) : f.raw)));
}

/** A `Resource`: its `resource` Any is rewritten in place. */
function rewriteResource(
  bytes: Uint8Array,
  filters: EncodedFilters,
  found: ListenerRewrite[],
): Uint8Array | undefined {
  const fields = readFields(bytes);
  let changed = false;
  const out = fields.map((f) => {
    if (!isLen(f, F.resource.resource)) return f.raw;
    const any = rewriteAny(f.value, filters, found);
    if (!any) return f.raw;
    changed = true;
    return lenField(f.number, any);
  });
  return changed ? concat(out) : undefined;
}

/**
 * Rewrites the Listener resources of a (Delta)DiscoveryResponse; other types pass untouched.
 *
 * @example
 * ```ts
 * const { bytes, listeners } = rewriteResponse(message, "sotw", filters);
 * ```
 * @throws {WireError} when the message is not well-formed protobuf
 */
export function rewriteResponse(
  bytes: Uint8Array,
  variant: Variant,
  filters: EncodedFilters,
): ResponseRewrite {
  const fields = readFields(bytes);
  const f = variant === "sotw" ? F.response : F.deltaResponse;
  const typeUrl = stringOf(fields, f.typeUrl) ?? "";
  const nonce = stringOf(fields, f.nonce) ?? "";
  const listeners: ListenerRewrite[] = [];
  if (typeUrl !== LISTENER_TYPE) return { bytes, typeUrl, nonce, listeners };
  let changed = false;
  const out = fields.map((field) => {
    if (!isLen(field, f.resources)) return field.raw;
    // SotW resources are Anys; delta resources are Resources wrapping an Any.
    const rewritten = variant === "sotw"
      ? rewriteAny(field.value, filters, listeners)
      : rewriteResource(field.value, filters, listeners);
    if (!rewritten) return field.raw;
    changed = true;
    return lenField(field.number, rewritten);
  });
  return { bytes: changed ? concat(out) : bytes, typeUrl, nonce, listeners };
}

/** What the proxy reads of a request. */
export interface RequestSummary {
  typeUrl: string;
  /** The nonce of the response this request answers ("" on a first request). */
  responseNonce: string;
  /** Set when the request is a NACK: Envoy's reason. */
  error?: { code: number; message: string };
}

/** Reads type, nonce and NACK detail of a (Delta)DiscoveryRequest. @throws {WireError} */
export function summarizeRequest(bytes: Uint8Array, variant: Variant): RequestSummary {
  const fields = readFields(bytes);
  const f = variant === "sotw" ? F.request : F.deltaRequest;
  const summary: RequestSummary = {
    typeUrl: stringOf(fields, f.typeUrl) ?? "",
    responseNonce: stringOf(fields, f.responseNonce) ?? "",
  };
  const detail = fields.find((field) => isLen(field, f.errorDetail));
  if (detail) {
    const status = readFields(detail.value);
    const code = status.find((s) =>
      s.number === F.status.code && s.wireType === WIRE.varint
    )?.varint ?? 0;
    const message = status.find((s) => isLen(s, F.status.message));
    summary.error = { code, message: message ? text(message.value) : "" };
  }
  return summary;
}
