// The process-wide state every worker VM shares: the in-flight counter and the draining flag.
// Raw shared-data calls with a compare-and-swap loop (docs/filter-protocol.md, "Counting").
//
// The counter's record also carries a copy of the draining flag (byte 16), so the hot path (one
// CAS per +1 or −1) learns whether a drain started from the record its CAS replaced, with no
// extra host call: outside a drain a request costs the CAS and the metric updates, nothing else.
// `lastcall.draining` stays the one place the drain is decided (exactly one VM's CAS sets it);
// that VM then sets the copy in the counter's record with a CAS and acks with the count of that
// same record. A +1/−1 whose CAS comes after the copy sees it and reports its transition; one
// whose CAS comes before is part of the count the ack carries. Either way nothing is missed.
import {
  Result, proxy_get_shared_data, proxy_set_shared_data,
} from "./abi";
import { OUT_PTR, OUT_SIZE, OUT_U32, freeHostBlock, utf8 } from "./memory";

const INFLIGHT_KEY = utf8("lastcall.inflight");
const DRAINING_KEY = utf8("lastcall.draining");
const value = __alloc(24, 0); // the record written back: u64 count, u64 version (little-endian), u8 draining
/** Bytes of `lastcall.inflight`: count, version, and the copy of the draining flag. */
const RECORD: usize = 17;
const DRAINING_COPY: usize = 16;

/** Count read by the last `readInflight` or written by the last `addInflight`. */
export let inflightCount: u64 = 0;
/** Version (the reports' `seq`) matching `inflightCount`. */
export let inflightVersion: u64 = 0;
/** The draining flag's copy in the same record as `inflightCount`. */
export let inflightDraining: bool = false;

// Reads `key` into `value` (up to 24 bytes, zero-filled); returns the CAS token, 0 when absent, -1 on error.
function read(key: ArrayBuffer): i64 {
  store<u64>(value, 0);
  store<u64>(value + 8, 0);
  store<u64>(value + 16, 0);
  store<u32>(OUT_PTR, 0);
  store<u32>(OUT_SIZE, 0);
  const result = proxy_get_shared_data(changetype<usize>(key), key.byteLength, OUT_PTR, OUT_SIZE, OUT_U32);
  if (result == Result.NotFound) return 0;
  const ptr = load<u32>(OUT_PTR) as usize;
  const size = load<u32>(OUT_SIZE) as usize;
  if (result == Result.Ok) memory.copy(value, ptr, size < 24 ? size : 24);
  freeHostBlock(ptr);
  return result == Result.Ok ? load<u32>(OUT_U32) as i64 : -1;
}

function write(key: ArrayBuffer, size: usize, cas: u32): u32 {
  return proxy_set_shared_data(changetype<usize>(key), key.byteLength, value, size, cas);
}

// Creates `key` with `size` zero bytes if it is absent; never overwrites a present value.
function createIfAbsent(key: ArrayBuffer, size: usize): bool {
  const cas = read(key); // zero-fills `value`
  if (cas != 0) return cas > 0;
  return write(key, size, 0) == Result.Ok;
}

/**
 * Creates `lastcall.inflight` as (0, 0, not draining) and `lastcall.draining` as byte 0 if they are absent, so
 * that every later write is a real CAS. There is no atomic create-if-absent: safe because the
 * main-thread VM configures before any worker VM exists (see docs/filter.md). A present key is
 * kept as it is: a re-configuration clears neither the count nor a drain.
 */
export function initShared(): bool {
  const inflight = createIfAbsent(INFLIGHT_KEY, RECORD);
  const draining = createIfAbsent(DRAINING_KEY, 1);
  return inflight && draining;
}

function takeRecord(): void {
  inflightCount = load<u64>(value);
  inflightVersion = load<u64>(value + 8);
  inflightDraining = load<u8>(value + DRAINING_COPY) == 1;
}

/** Reads the counter into `inflightCount`/`inflightVersion`/`inflightDraining`; false if the host failed. */
export function readInflight(): bool {
  const cas = read(INFLIGHT_KEY);
  takeRecord();
  return cas >= 0;
}

/**
 * Adds `delta` (±1) to the counter with a CAS loop; false if nothing changed: a host error, or a
 * −1 on a zero count (never below zero; cannot happen while every stream is counted once).
 */
export function addInflight(delta: i64): bool {
  while (true) {
    const cas = read(INFLIGHT_KEY);
    if (cas < 0) return false;
    const count = load<u64>(value);
    if (delta < 0 && count == 0) return false;
    store<u64>(value, count + (delta as u64));
    store<u64>(value + 8, load<u64>(value + 8) + 1);
    const result = write(INFLIGHT_KEY, RECORD, cas as u32); // the draining copy is written back as read
    if (result == Result.Ok) {
      takeRecord();
      return true;
    }
    if (result != Result.CasMismatch) return false;
  }
}

/** Whether some VM recorded that the agent is draining. */
export function readDraining(): bool {
  return read(DRAINING_KEY) > 0 && load<u8>(value) == 1;
}

/**
 * Sets the draining flag; true only for the one caller whose write set it (a CAS on the key
 * `initShared` created, so two racing workers cannot both win). That caller then sets the copy in
 * the counter's record (count and version unchanged) and leaves that record in
 * `inflightCount`/`inflightVersion`: the count the ack reports, read after the flag was set.
 * Sticky: a drain ends with the process, so no answer clears it (a late stale answer must not
 * hide a drain). False also if the copy cannot be written (a host error): no ack is sent then.
 */
export function setDraining(): bool {
  while (true) {
    const cas = read(DRAINING_KEY);
    if (cas < 0 || (cas > 0 && load<u8>(value) == 1)) return false;
    store<u8>(value, 1);
    const result = write(DRAINING_KEY, 1, cas as u32);
    if (result == Result.Ok) return copyDraining();
    if (result != Result.CasMismatch) return false;
  }
}

// Sets the draining copy in the counter's record with a CAS loop; the record it wrote is taken.
function copyDraining(): bool {
  while (true) {
    const cas = read(INFLIGHT_KEY);
    if (cas <= 0) return false;
    store<u8>(value + DRAINING_COPY, 1);
    const result = write(INFLIGHT_KEY, RECORD, cas as u32);
    if (result == Result.Ok) {
      takeRecord();
      return true;
    }
    if (result != Result.CasMismatch) return false;
  }
}
