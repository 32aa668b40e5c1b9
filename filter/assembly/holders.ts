// The holders of a drain: when the agent asks, the VM names its oldest tracked live streams, read
// through the effective context.
import { Result, proxy_get_property, proxy_set_effective_context } from "./abi";
import { MAX_PATH_BYTES, kept, keptSize } from "./kept";
import { oldestLive, vmInflight } from "./live";
import { Bytes, OUT_PTR, OUT_SIZE, freeHostBlock } from "./memory";

/** Most holders one report names (`x-lastcall-holders` above it is ignored). */
export const MAX_HOLDERS: i32 = 32;

/**
 * The agent's cap on a report body (REPORT_MAX_BYTES): a holder that would push the body past it
 * is left out, with every later one (only paths full of escaped bytes get there).
 */
export const MAX_REPORT_BYTES: i32 = 16384;

// Property paths: segments separated by NUL.
const TIME = String.UTF8.encode("request\0time");
const METHOD = String.UTF8.encode("request\0method");
const URL_PATH = String.UTF8.encode("request\0url_path");
const ADDRESS = String.UTF8.encode("destination\0address");
const PROTOCOL = String.UTF8.encode("request\0protocol");
const CLUSTER = String.UTF8.encode("xds\0cluster_name");
const ROUTE = String.UTF8.encode("xds\0route_name");

/**
 * The value of `x-lastcall-holders` (`size` bytes at `ptr`): 1 to 32, decimal digits, no sign, no
 * leading zero, nothing around them; 0 for anything else.
 *
 * @example
 * ```ts
 * parseHolderCount(changetype<usize>(String.UTF8.encode("32")), 2); // 32
 * parseHolderCount(changetype<usize>(String.UTF8.encode("033")), 3); // 0
 * ```
 */
export function parseHolderCount(ptr: usize, size: usize): i32 {
  if (size < 1 || size > 2 || load<u8>(ptr) == 0x30) return 0;
  let n: i32 = 0;
  for (let i: usize = 0; i < size; i++) {
    const digit = (load<u8>(ptr + i) as i32) - 0x30;
    if (digit < 0 || digit > 9) return 0;
    n = n * 10 + digit;
  }
  return n <= MAX_HOLDERS ? n : 0;
}

// Reads one property of the effective context. When true, OUT_PTR/OUT_SIZE hold the value, which
// the caller reads in place and frees with `freeHostBlock(load<u32>(OUT_PTR))`.
function property(path: ArrayBuffer): bool {
  store<u32>(OUT_PTR, 0);
  store<u32>(OUT_SIZE, 0);
  if (proxy_get_property(changetype<usize>(path), path.byteLength, OUT_PTR, OUT_SIZE) == Result.Ok) return true;
  freeHostBlock(load<u32>(OUT_PTR) as usize);
  return false;
}

const HEX = "0123456789abcdef";
const escape = new ArrayBuffer(6);

/** Appends `size` bytes as a JSON string: `"` and `\` escaped, bytes < 0x20 or >= 0x7f as \u00XX. */
export function jsonString(out: Bytes, ptr: usize, size: i32): void {
  const e = changetype<usize>(escape);
  out.str('"');
  let from = 0;
  for (let i = 0; i < size; i++) {
    const byte = load<u8>(ptr + i) as i32;
    const plain = byte >= 0x20 && byte < 0x7f && byte != 0x22 && byte != 0x5c;
    if (plain) continue;
    out.raw(ptr + from, i - from);
    from = i + 1;
    store<u8>(e, 0x5c);
    if (byte == 0x22 || byte == 0x5c) {
      store<u8>(e + 1, byte as u8);
      out.raw(e, 2);
      continue;
    }
    store<u8>(e + 1, 0x75); // u
    store<u8>(e + 2, 0x30);
    store<u8>(e + 3, 0x30);
    store<u8>(e + 4, HEX.charCodeAt(byte >> 4) as u8);
    store<u8>(e + 5, HEX.charCodeAt(byte & 15) as u8);
    out.raw(e, 6);
  }
  out.raw(ptr + from, size - from);
  out.str('"');
}

// Appends `,"<key>":"<value>"` from the property at `path`, at most `max` bytes of it; nothing if missing or empty.
function stringField(out: Bytes, key: string, path: ArrayBuffer, max: i32): void {
  if (!property(path)) return;
  const ptr = load<u32>(OUT_PTR) as usize;
  const size = load<u32>(OUT_SIZE) as i32;
  if (size == 0) { // an unnamed route: nothing to say
    freeHostBlock(ptr);
    return;
  }
  out.str(',"').str(key).str('":');
  jsonString(out, ptr, size < max ? size : max);
  freeHostBlock(ptr);
}

// Appends `,"<key>":"<value>"` from what was kept of stream `id` at its request headers (the path
// when `path`, else the method); false when nothing was kept.
function keptField(out: Bytes, key: string, id: u32, path: bool): bool {
  const ptr = kept(id, path);
  if (ptr == 0) return false;
  out.str(',"').str(key).str('":');
  jsonString(out, ptr, keptSize as i32);
  return true;
}

// One holder, read through the effective context `id`; null if the host no longer knows it.
function holder(id: u32): Bytes | null {
  if (proxy_set_effective_context(id) != Result.Ok) return null;
  const out = new Bytes().str('{"id":').num(id);
  if (property(TIME)) {
    const ptr = load<u32>(OUT_PTR) as usize;
    if (load<u32>(OUT_SIZE) == 8) out.str(',"start_ns":').str(load<i64>(ptr).toString());
    freeHostBlock(ptr);
  }
  if (!keptField(out, "method", id, false)) stringField(out, "method", METHOD, 64);
  if (!keptField(out, "path", id, true)) stringField(out, "path", URL_PATH, MAX_PATH_BYTES);
  stringField(out, "address", ADDRESS, 128);
  // Envoy 1.40 keeps a request's headers from a filter after its headers callback: method and
  // path are then missing (unless kept), but where the request went is not.
  stringField(out, "protocol", PROTOCOL, 16);
  stringField(out, "cluster", CLUSTER, 128);
  stringField(out, "route", ROUTE, 128);
  return out.str("}");
}

/**
 * Appends `,"vm_inflight":<n>,"holders":[…]` to a report body: this VM's `n` oldest tracked live
 * streams, oldest first, each with the properties Envoy has for it (a missing one is left out).
 * The effective context is `rootId`'s again when it returns. The body stays within
 * `MAX_REPORT_BYTES` once the caller closes it with `}`.
 *
 * @example
 * ```ts
 * const body = new Bytes().str('{"reason":"holders"');
 * appendHolders(body, 32, rootId); // ,"vm_inflight":1,"holders":[{"id":7,"start_ns":…,"method":"GET","path":"/x","address":"127.0.0.1:8080"}]
 * body.str("}");
 * ```
 */
export function appendHolders(body: Bytes, n: i32, rootId: u32): void {
  body.str(',"vm_inflight":').num(vmInflight).str(',"holders":[');
  const ids = oldestLive(n);
  let first = true;
  for (let i = 0; i < ids.length; i++) {
    const item = holder(ids[i]);
    if (item === null) continue;
    if (body.length + item.length + 3 > MAX_REPORT_BYTES) break; // a comma, then "]}"
    if (!first) body.str(",");
    body.raw(item.ptr(), item.length);
    first = false;
  }
  if (ids.length > 0) proxy_set_effective_context(rootId);
  body.str("]");
}
