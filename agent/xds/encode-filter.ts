// The filter's Envoy config encoded as the protobuf an xDS response carries, from a small schema of
// exactly the messages it uses.
import { concat, lenField, stringField, varintField } from "./wire.ts";

type Json = Record<string, unknown>;
type FieldKind = "string" | "bool" | "any" | { enum: Record<string, number> } | { message: string };

/** Field numbers from Envoy's API (envoy/extensions/wasm/v3/wasm.proto and friends, 1.36–1.40). */
const SCHEMA: Record<string, Record<string, [number, FieldKind]>> = {
  // envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter and
  // envoy.config.listener.v3.Filter: both have name = 1, typed_config = 4.
  Filter: { name: [1, "string"], typed_config: [4, "any"] },
  // envoy.extensions.filters.{http,network}.wasm.v3.Wasm
  Wasm: { config: [1, { message: "PluginConfig" }] },
  PluginConfig: {
    name: [1, "string"],
    root_id: [2, "string"],
    vm_config: [3, { message: "VmConfig" }],
    configuration: [4, "any"],
    fail_open: [5, "bool"],
    failure_policy: [7, { enum: { UNSPECIFIED: 0, FAIL_RELOAD: 1, FAIL_CLOSED: 2, FAIL_OPEN: 3 } }],
  },
  VmConfig: {
    vm_id: [1, "string"],
    runtime: [2, "string"],
    code: [3, { message: "AsyncDataSource" }],
    configuration: [4, "any"],
    allow_precompiled: [5, "bool"],
    nack_on_code_cache_miss: [6, "bool"],
  },
  AsyncDataSource: { local: [1, { message: "DataSource" }] },
  DataSource: { filename: [1, "string"], inline_string: [3, "string"] },
  StringValue: { value: [1, "string"] },
};

/** The message each `@type` of an Any in that JSON names. */
const ANY_TYPES: Record<string, string> = {
  "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm": "Wasm",
  "type.googleapis.com/envoy.extensions.filters.network.wasm.v3.Wasm": "Wasm",
  "type.googleapis.com/google.protobuf.StringValue": "StringValue",
};

/** A filter JSON that this encoder does not cover. */
export class FilterEncodingError extends Error {
  override name = "FilterEncodingError";
}

function encodeMessage(json: unknown, type: string, path: string): Uint8Array {
  if (typeof json !== "object" || json === null || Array.isArray(json)) {
    throw new FilterEncodingError(`Cannot encode ${path}: not an object: ${JSON.stringify(json)}`);
  }
  const schema = SCHEMA[type];
  const parts: Uint8Array[] = [];
  // Fields in number order, as protobuf serializers write them.
  const entries = Object.entries(json as Json);
  for (const [key] of entries) {
    if (!schema[key]) {
      throw new FilterEncodingError(
        `Cannot encode ${path}.${key}: no such field of ${type} in lastcall's schema`,
      );
    }
  }
  entries.sort(([a], [b]) => schema[a][0] - schema[b][0]);
  for (const [key, value] of entries) {
    const [number, kind] = schema[key];
    const at = `${path}.${key}`;
    if (kind === "string") {
      if (typeof value !== "string") {
        throw new FilterEncodingError(
          `Cannot encode ${at}: not a string: ${JSON.stringify(value)}`,
        );
      }
      if (value !== "") parts.push(stringField(number, value));
    } else if (kind === "bool") {
      if (typeof value !== "boolean") {
        throw new FilterEncodingError(
          `Cannot encode ${at}: not a boolean: ${JSON.stringify(value)}`,
        );
      }
      if (value) parts.push(varintField(number, 1));
    } else if (kind === "any") {
      parts.push(lenField(number, encodeAny(value, at)));
    } else if ("enum" in kind) {
      const n = kind.enum[String(value)];
      if (n === undefined) {
        throw new FilterEncodingError(
          `Cannot encode ${at}: unknown value ${JSON.stringify(value)}`,
        );
      }
      if (n !== 0) parts.push(varintField(number, n));
    } else {
      parts.push(lenField(number, encodeMessage(value, kind.message, at)));
    }
  }
  return concat(parts);
}

/** `google.protobuf.Any`: type_url = 1, value = 2. */
function encodeAny(json: unknown, path: string): Uint8Array {
  const typeUrl = (json as Json | null)?.["@type"];
  const type = typeof typeUrl === "string" ? ANY_TYPES[typeUrl] : undefined;
  if (!type) {
    throw new FilterEncodingError(
      `Cannot encode ${path}: unknown @type ${JSON.stringify(typeUrl)}`,
    );
  }
  const { "@type": _, ...fields } = json as Json;
  return concat([
    stringField(1, typeUrl as string),
    lenField(2, encodeMessage(fields, type, path)),
  ]);
}

/**
 * Encodes the JSON of an HttpFilter or listener Filter as built by `wasmFilter()`.
 *
 * @example
 * ```ts
 * const bytes = encodeFilter(wasmFilter(filter)); // an HttpFilter message
 * ```
 * @throws {FilterEncodingError} naming the key when the JSON has something the schema lacks
 */
export function encodeFilter(json: Record<string, unknown>): Uint8Array {
  return encodeMessage(json, "Filter", "filter");
}
