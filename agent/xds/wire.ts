// Protocol buffers at the wire level: enough to walk a message field by field, keep every byte
// of the fields it does not touch, and write the few it changes. No schema: fields lastcall does
// not know (a newer Envoy's) are copied verbatim.

/** Wire types (the low 3 bits of a tag). */
export const WIRE = { varint: 0, i64: 1, len: 2, sgroup: 3, egroup: 4, i32: 5 } as const;

/** One field of a message, as it lies in the buffer. */
export interface WireField {
  /** Field number. */
  number: number;
  /** Wire type. */
  wireType: number;
  /** The whole field: tag, length prefix (if any) and payload. */
  raw: Uint8Array;
  /** The payload of a length-delimited field (empty for other wire types). */
  value: Uint8Array;
  /** A varint field's value (0 for other wire types). */
  varint: number;
}

/** A message that is not valid protobuf wire format. */
export class WireError extends Error {
  override name = "WireError";
}

function readVarint(bytes: Uint8Array, at: number): [value: number, next: number] {
  let value = 0;
  let scale = 1;
  for (let i = at; i < bytes.length && i < at + 10; i++) {
    const b = bytes[i];
    value += (b & 0x7f) * scale;
    scale *= 128;
    if ((b & 0x80) === 0) return [value, i + 1];
  }
  throw new WireError(`Truncated varint at byte ${at}`);
}

/**
 * The fields of one message in order. Groups (wire types 3 and 4, unused by Envoy's API) are
 * passed through as a whole up to their end tag.
 *
 * @throws {WireError} when the bytes are not a well-formed message
 */
export function readFields(bytes: Uint8Array): WireField[] {
  const fields: WireField[] = [];
  let at = 0;
  while (at < bytes.length) {
    const start = at;
    const [tag, afterTag] = readVarint(bytes, at);
    const number = Math.floor(tag / 8);
    const wireType = tag % 8;
    if (number === 0) throw new WireError(`Field number 0 at byte ${start}`);
    let value: Uint8Array = new Uint8Array(0);
    let varint = 0;
    switch (wireType) {
      case WIRE.varint:
        [varint, at] = readVarint(bytes, afterTag);
        break;
      case WIRE.i64:
        at = afterTag + 8;
        break;
      case WIRE.i32:
        at = afterTag + 4;
        break;
      case WIRE.len: {
        const [length, afterLength] = readVarint(bytes, afterTag);
        at = afterLength + length;
        value = bytes.subarray(afterLength, at);
        break;
      }
      case WIRE.sgroup:
        at = skipGroup(bytes, afterTag, number);
        break;
      default:
        throw new WireError(`Wire type ${wireType} of field ${number} at byte ${start}`);
    }
    if (at > bytes.length) {
      throw new WireError(`Field ${number} at byte ${start} runs past the end`);
    }
    fields.push({ number, wireType, raw: bytes.subarray(start, at), value, varint });
  }
  return fields;
}

function skipGroup(bytes: Uint8Array, at: number, number: number): number {
  return findGroupEnd(bytes, at, number) + varintLength(number * 8 + WIRE.egroup);
}

function findGroupEnd(bytes: Uint8Array, at: number, number: number): number {
  let depth = 0;
  while (at < bytes.length) {
    const [tag, afterTag] = readVarint(bytes, at);
    const wireType = tag % 8;
    if (wireType === WIRE.egroup) {
      if (depth === 0 && Math.floor(tag / 8) === number) return at;
      depth--;
      at = afterTag;
    } else if (wireType === WIRE.sgroup) {
      depth++;
      at = afterTag;
    } else if (wireType === WIRE.varint) at = readVarint(bytes, afterTag)[1];
    else if (wireType === WIRE.i64) at = afterTag + 8;
    else if (wireType === WIRE.i32) at = afterTag + 4;
    else if (wireType === WIRE.len) {
      const [length, afterLength] = readVarint(bytes, afterTag);
      at = afterLength + length;
    } else throw new WireError(`Wire type ${wireType} at byte ${at}`);
  }
  throw new WireError(`Unterminated group ${number}`);
}

function varintLength(value: number): number {
  let n = 1;
  while (value >= 128) {
    value = Math.floor(value / 128);
    n++;
  }
  return n;
}

/** The varint encoding of a non-negative integer up to 2^53. */
export function encodeVarint(value: number): Uint8Array {
  const out: number[] = [];
  while (value >= 128) {
    out.push((value % 128) | 0x80);
    value = Math.floor(value / 128);
  }
  out.push(value);
  return Uint8Array.from(out);
}

/** Joins byte arrays. */
export function concat(parts: readonly Uint8Array[]): Uint8Array {
  let length = 0;
  for (const p of parts) length += p.length;
  const out = new Uint8Array(length);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** A length-delimited field: tag, length, payload. */
export function lenField(number: number, payload: Uint8Array): Uint8Array {
  return concat([encodeVarint(number * 8 + WIRE.len), encodeVarint(payload.length), payload]);
}

/** A varint field. */
export function varintField(number: number, value: number): Uint8Array {
  return concat([encodeVarint(number * 8 + WIRE.varint), encodeVarint(value)]);
}

const utf8 = new TextEncoder();
const fromUtf8 = new TextDecoder();

/** A string field. */
export function stringField(number: number, value: string): Uint8Array {
  return lenField(number, utf8.encode(value));
}

/** The text of a length-delimited field. */
export function text(value: Uint8Array): string {
  return fromUtf8.decode(value);
}

/** The first string of field `number`, or undefined. */
export function stringOf(fields: readonly WireField[], number: number): string | undefined {
  const field = fields.find((f) => f.number === number && f.wireType === WIRE.len);
  return field ? text(field.value) : undefined;
}
