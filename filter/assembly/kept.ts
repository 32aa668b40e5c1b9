// Method and path kept at the request headers for the holders of a drain, when a plugin has
// `holder_paths`.
import { HeaderMap, Result, proxy_get_header_map_value } from "./abi";
import { OUT_PTR, OUT_SIZE, freeHostBlock, utf8 } from "./memory";

/** Bytes of a method kept. */
export const MAX_METHOD_BYTES: i32 = 16;
/** Bytes of a path kept (before escaping; the query string is cut first). */
export const MAX_PATH_BYTES: i32 = 256;
/** A host block larger than this is trimmed to what is kept. */
const MAX_KEPT_BLOCK: u32 = 256;

const SLOTS: usize = 16384;
const MASK: u32 = 16383;
const ENTRY: usize = 16;

/** The entries (SLOTS × 16 bytes), allocated at the first request kept; 0 until then. */
export let keptTable: usize = 0;

const METHOD = utf8(":method");
const PATH = utf8(":path");

// Reads one request header of the running stream: its host block, or 0 (OUT_SIZE holds the size).
function header(name: ArrayBuffer): usize {
  store<u32>(OUT_PTR, 0);
  store<u32>(OUT_SIZE, 0);
  const result = proxy_get_header_map_value(HeaderMap.RequestHeaders, changetype<usize>(name), name.byteLength, OUT_PTR, OUT_SIZE);
  const ptr = load<u32>(OUT_PTR) as usize;
  if (result == Result.Ok && load<u32>(OUT_SIZE) > 0) return ptr;
  freeHostBlock(ptr);
  return 0;
}

// A host block of `size` bytes of which `kept` are kept: trimmed in place when it is large.
function trim(ptr: usize, size: u32, kept: u32): usize {
  if (size <= MAX_KEPT_BLOCK) return ptr;
  const left: usize = kept > 0 ? kept as usize : 1;
  return __realloc(ptr, left);
}

// Frees the blocks of one entry and clears it.
function clear(entry: usize): void {
  freeHostBlock(load<u32>(entry + 4) as usize);
  freeHostBlock(load<u32>(entry + 8) as usize);
  store<u64>(entry, 0);
  store<u64>(entry + 8, 0);
}

/**
 * At the request headers of stream `id`, which owns its slot: reads `:method` (first 16 bytes)
 * and `:path` (up to `?`, first 256 bytes) and keeps them in the slot's entry. Two host calls.
 *
 * @example
 * ```ts
 * if (ownsSlot(id)) keepRequest(id); // in proxy_on_request_headers, when holder_paths is on
 * ```
 */
export function keepRequest(id: u32): void {
  if (keptTable == 0) {
    keptTable = __alloc(SLOTS * ENTRY, 0);
    memory.fill(keptTable, 0, SLOTS * ENTRY);
  }
  const entry = keptTable + ((id & MASK) as usize) * ENTRY;
  if (load<u32>(entry) != 0) clear(entry); // headers delivered twice: the later ones win
  let method = header(METHOD);
  let methodSize: u32 = 0;
  if (method != 0) {
    const size = load<u32>(OUT_SIZE);
    methodSize = size < (MAX_METHOD_BYTES as u32) ? size : MAX_METHOD_BYTES as u32;
    method = trim(method, size, methodSize);
  }
  let path = header(PATH);
  let pathSize: u32 = 0;
  if (path != 0) {
    const size = load<u32>(OUT_SIZE);
    const max = size < (MAX_PATH_BYTES as u32) ? size : MAX_PATH_BYTES as u32;
    while (pathSize < max && load<u8>(path + pathSize) != 0x3f) pathSize++; // up to '?'
    path = trim(path, size, pathSize);
  }
  store<u32>(entry, id);
  store<u32>(entry + 4, method as u32);
  store<u32>(entry + 8, path as u32);
  store<u32>(entry + 12, methodSize | (pathSize << 16));
}

/** Stream `id` left its slot: its kept method and path, if any, are freed. */
export function releaseKept(id: u32): void {
  const entry = keptTable + ((id & MASK) as usize) * ENTRY;
  if (load<u32>(entry) == id) clear(entry);
}

/**
 * The kept method (`path` false) or path (`path` true) of live stream `id`: its address, with its
 * size in `keptSize`; 0 when none is kept (the key off, no such header, or an empty value).
 */
export function kept(id: u32, path: bool): usize {
  keptSize = 0;
  if (keptTable == 0) return 0;
  const entry = keptTable + ((id & MASK) as usize) * ENTRY;
  if (load<u32>(entry) != id) return 0;
  const sizes = load<u32>(entry + 12);
  keptSize = path ? sizes >> 16 : sizes & 0xffff;
  return keptSize == 0 ? 0 : load<u32>(entry + (path ? 8 : 4)) as usize;
}

/** Size of the value `kept` last returned. */
export let keptSize: u32 = 0;
