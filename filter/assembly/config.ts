// The plugin configuration (docs/filter-protocol.md): a flat JSON object parsed straight from the
// host's bytes. Never traps: every read is bounds-checked and nesting is limited.
import { Bytes, utf8 } from "./memory";

const MAX_U32: u64 = 0xffffffff;
const MAX_SAFE: u64 = 9007199254740991; // echoed to a JavaScript agent: stay exact there
const MAX_DEPTH = 16;
const MAX_TOKEN = 256;

/** Effective settings of one plugin (root context). */
export class Config {
  /** Cluster reports go to; empty disables reports. */
  agentCluster: ArrayBuffer = utf8("lastcall_agent");
  /** `:authority` of the reports. */
  agentAuthority: ArrayBuffer = utf8("lastcall");
  /** Heartbeat period of each VM; 0 disables heartbeats. */
  heartbeatMs: u32 = 1000;
  /** Timeout of one report call. */
  pushTimeoutMs: u32 = 1000;
  /** Envoy restart epoch echoed in reports. */
  epoch: u64 = 0;
  /** Instance id, kept JSON-escaped exactly as written so reports can echo it verbatim. */
  instanceJson: ArrayBuffer = new ArrayBuffer(0);
  /** Sent as `x-lastcall-token` with every report when not empty (visible ASCII only). */
  token: ArrayBuffer = new ArrayBuffer(0);
  /** Name of the in-flight gauge (under `wasmcustom.`); `_odd` is appended for odd epochs. */
  gauge: string = "lastcall_inflight";
  /** Unescaped exclude_paths entries; a trailing `*` marks a prefix. */
  excludePaths: ArrayBuffer[] = [];
  /**
   * Keep each request's method and path (query cut) at its request headers, to name them among
   * the holders of a drain (two header reads per request: off unless the operator asks).
   */
  holderPaths: bool = false;
  /** Why the configuration was refused; empty when it is valid. */
  error: string = "";
  /** The offending bytes named in the error. */
  errorValue: ArrayBuffer = new ArrayBuffer(0);
}

/** Parses a plugin configuration; a refused one has `error` set and the rest at defaults. */
export function parseConfig(text: ArrayBuffer): Config {
  const parser = new Parser(text);
  const config = new Config();
  parser.object(config);
  if (parser.error.length == 0) {
    parser.ws();
    if (parser.pos < parser.end) parser.fail("trailing data after the object", parser.pos, parser.end);
  }
  config.error = parser.error;
  config.errorValue = parser.errorValue;
  return config;
}

/** The error line the filter logs for a refused configuration. */
export function configErrorLine(config: Config): Bytes {
  return new Bytes().str("lastcall: invalid plugin configuration: ").str(config.error).str(": ")
    .excerpt(changetype<usize>(config.errorValue), config.errorValue.byteLength, 200);
}

class Parser {
  base: usize;
  pos: usize;
  end: usize;
  error: string = "";
  errorValue: ArrayBuffer = new ArrayBuffer(0);

  text: ArrayBuffer;

  constructor(text: ArrayBuffer) {
    this.text = text;
    this.base = changetype<usize>(text);
    this.pos = this.base;
    this.end = this.base + text.byteLength;
  }

  fail(message: string, from: usize, to: usize): void {
    if (this.error.length > 0) return;
    this.error = message;
    const size = (to > from ? to - from : 0) as i32;
    this.errorValue = new ArrayBuffer(size);
    memory.copy(changetype<usize>(this.errorValue), from, size);
  }

  ok(): bool {
    return this.error.length == 0;
  }

  peek(): i32 {
    return this.pos < this.end ? load<u8>(this.pos) as i32 : -1;
  }

  ws(): void {
    while (this.pos < this.end) {
      const c = load<u8>(this.pos);
      if (c != 0x20 && c != 0x09 && c != 0x0a && c != 0x0d) break;
      this.pos++;
    }
  }

  malformed(): void {
    this.fail("malformed JSON at byte " + ((this.pos - this.base) as u32).toString(), this.base, this.end);
  }

  object(config: Config): void {
    this.ws();
    if (this.pos == this.end) return; // empty configuration: all defaults
    const start = this.pos;
    if (this.peek() != 0x7b) { // {
      this.skipValue(0);
      if (this.ok()) this.fail("not a JSON object", start, this.pos);
      return;
    }
    this.pos++;
    this.ws();
    if (this.peek() == 0x7d) { this.pos++; return; } // }
    while (this.ok()) {
      this.ws();
      const keyStart = this.pos;
      if (this.peek() != 0x22) { this.malformed(); return; }
      this.skipString();
      if (!this.ok()) return;
      const key = String.UTF8.decodeUnsafe(keyStart + 1, this.pos - keyStart - 2);
      this.ws();
      if (this.peek() != 0x3a) { this.malformed(); return; } // :
      this.pos++;
      this.ws();
      this.member(config, key);
      this.ws();
      const c = this.peek();
      this.pos++;
      if (c == 0x7d) return; // }
      if (c != 0x2c) { this.pos--; this.malformed(); return; } // ,
    }
  }

  member(config: Config, key: string): void {
    const start = this.pos;
    const isString = this.peek() == 0x22;
    this.skipValue(0);
    if (!this.ok()) return;
    const end = this.pos;
    if (key == "agent_cluster" || key == "agent_authority" || key == "instance" || key == "token" || key == "gauge") {
      if (!isString) { this.fail('"' + key + '" must be a string', start, end); return; }
      if (key == "instance") {
        config.instanceJson = this.text.slice((start + 1 - this.base) as i32, (end - 1 - this.base) as i32);
        return;
      }
      const value = this.unescape(start, end);
      if (!this.ok()) return;
      if (key == "agent_cluster") config.agentCluster = value;
      else if (key == "gauge") {
        if (isStatName(value)) config.gauge = String.UTF8.decode(value);
        else this.fail('"gauge" must be 1 to 64 characters from a-z, 0-9 and _', start, end);
      }
      else if (key == "token") {
        if (isToken(value)) config.token = value;
        else this.fail('"token" must be at most 256 visible ASCII characters (0x21 to 0x7e)', start, end);
      }
      else if (value.byteLength == 0) this.fail('"agent_authority" must not be empty', start, end);
      else config.agentAuthority = value;
    } else if (key == "heartbeat_ms") {
      config.heartbeatMs = this.integer(key, start, end, 0, MAX_U32) as u32;
    } else if (key == "push_timeout_ms") {
      config.pushTimeoutMs = this.integer(key, start, end, 1, MAX_U32) as u32;
    } else if (key == "epoch") {
      config.epoch = this.integer(key, start, end, 0, MAX_SAFE);
    } else if (key == "exclude_paths") {
      this.paths(config, start, end);
    } else if (key == "holder_paths") {
      config.holderPaths = this.boolean(key, start, end);
    } else {
      this.fail('unknown key "' + key + '"', start, end);
    }
  }

  integer(key: string, start: usize, end: usize, min: u64, max: u64): u64 {
    let value: u64 = 0;
    let valid = end > start && (end - start == 1 || load<u8>(start) != 0x30) && end - start <= 16;
    for (let p = start; valid && p < end; p++) {
      const digit = (load<u8>(p) as i32) - 0x30;
      if (digit < 0 || digit > 9) valid = false;
      else value = value * 10 + (digit as u64);
    }
    if (!valid || value < min || value > max) {
      this.fail('"' + key + '" must be an integer from ' + min.toString() + " to " + max.toString(), start, end);
      return 0;
    }
    return value;
  }

  boolean(key: string, start: usize, end: usize): bool {
    this.pos = start;
    const yes = this.word("true");
    if (yes || this.word("false")) {
      if (this.pos == end) return yes;
    }
    this.pos = end;
    this.fail('"' + key + '" must be true or false', start, end);
    return false;
  }

  paths(config: Config, start: usize, end: usize): void {
    const message = '"exclude_paths" must be an array of strings';
    if (load<u8>(start) != 0x5b) { this.fail(message, start, end); return; } // [
    const paths: ArrayBuffer[] = [];
    this.pos = start + 1;
    this.ws();
    if (this.peek() == 0x5d) { this.pos = end; config.excludePaths = paths; return; } // ]
    while (this.ok() && this.pos < end) {
      this.ws();
      const itemStart = this.pos;
      if (this.peek() != 0x22) { this.fail(message, start, end); return; }
      this.skipString();
      const value = this.unescape(itemStart, this.pos);
      if (!this.ok()) return;
      if (value.byteLength == 0) { this.fail('"exclude_paths" entries must not be empty', start, end); return; }
      paths.push(value);
      this.ws();
      this.pos++; // ',' or the closing ']' (already validated by skipValue)
    }
    this.pos = end;
    config.excludePaths = paths;
  }

  // Skips one JSON value of any kind, checking its syntax.
  skipValue(depth: i32): void {
    if (depth > MAX_DEPTH) { this.fail("JSON nested too deeply", this.base, this.end); return; }
    this.ws();
    const c = this.peek();
    if (c == 0x22) { this.skipString(); return; }
    if (c == 0x7b || c == 0x5b) {
      const close = c == 0x7b ? 0x7d : 0x5d;
      this.pos++;
      this.ws();
      if (this.peek() == close) { this.pos++; return; }
      while (this.ok()) {
        if (c == 0x7b) {
          this.ws();
          if (this.peek() != 0x22) { this.malformed(); return; }
          this.skipString();
          this.ws();
          if (this.peek() != 0x3a) { this.malformed(); return; }
          this.pos++;
        }
        this.skipValue(depth + 1);
        if (!this.ok()) return;
        this.ws();
        const next = this.peek();
        if (next == close) { this.pos++; return; }
        if (next != 0x2c) { this.malformed(); return; }
        this.pos++;
      }
      return;
    }
    if (c == 0x2d || (c >= 0x30 && c <= 0x39)) { this.skipNumber(); return; }
    if (this.word("true") || this.word("false") || this.word("null")) return;
    this.malformed();
  }

  word(text: string): bool {
    const len = text.length;
    if (this.end - this.pos < (len as usize)) return false;
    for (let i = 0; i < len; i++) {
      if ((load<u8>(this.pos + i) as i32) != text.charCodeAt(i)) return false;
    }
    this.pos += len;
    return true;
  }

  skipNumber(): void {
    const start = this.pos;
    if (this.peek() == 0x2d) this.pos++;
    let digits = 0;
    while (true) {
      const c = this.peek();
      if (c >= 0x30 && c <= 0x39) digits++;
      else if (!(c == 0x2e || c == 0x65 || c == 0x45 || c == 0x2b || c == 0x2d)) break; // . e E + -
      this.pos++;
    }
    if (digits == 0) { this.pos = start; this.malformed(); }
  }

  skipString(): void {
    this.pos++; // opening quote
    while (this.pos < this.end) {
      const c = load<u8>(this.pos);
      if (c == 0x22) { this.pos++; return; }
      if (c < 0x20) break;
      if (c == 0x5c) { // backslash
        this.pos++;
        if (this.pos >= this.end) break;
        const e = load<u8>(this.pos);
        if (e == 0x75) { // u
          if (this.end - this.pos < 5 || hex4(this.pos + 1) < 0) break;
          this.pos += 4;
        } else if (e != 0x22 && e != 0x5c && e != 0x2f && e != 0x62 && e != 0x66 && e != 0x6e && e != 0x72 && e != 0x74) {
          break;
        }
      }
      this.pos++;
    }
    this.malformed();
  }

  // Unescapes a string token [start, end) (quotes included, syntax already checked) to UTF-8.
  unescape(start: usize, end: usize): ArrayBuffer {
    const out = new Bytes();
    let p = start + 1;
    const last = end - 1;
    while (p < last) {
      const c = load<u8>(p);
      if (c != 0x5c) { out.raw(p, 1); p++; continue; }
      const e = load<u8>(p + 1);
      p += 2;
      if (e != 0x75) {
        const mapped: u8 = e == 0x62 ? 8 : e == 0x66 ? 12 : e == 0x6e ? 10 : e == 0x72 ? 13 : e == 0x74 ? 9 : e;
        out.raw(changetype<usize>(mappedByte(mapped)), 1);
        continue;
      }
      let code = hex4(p) as u32;
      p += 4;
      if (code >= 0xd800 && code <= 0xdbff && last - p >= 6 && load<u8>(p) == 0x5c && load<u8>(p + 1) == 0x75) {
        const low = hex4(p + 2) as u32;
        if (low >= 0xdc00 && low <= 0xdfff) {
          code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
          p += 6;
        }
      }
      if (code >= 0xd800 && code <= 0xdfff) { this.fail("lone surrogate in a string", start, end); break; }
      out.buf(String.UTF8.encode(String.fromCodePoint(code)));
    }
    return out.toArrayBuffer();
  }
}

// Whether `value` can go verbatim into a header value: at most MAX_TOKEN bytes, each 0x21 to 0x7e.
function isToken(value: ArrayBuffer): bool {
  const size = value.byteLength;
  if (size > MAX_TOKEN) return false;
  const base = changetype<usize>(value);
  for (let i = 0; i < size; i++) {
    const c = load<u8>(base + i);
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

const oneByte = new ArrayBuffer(1);
function mappedByte(value: u8): ArrayBuffer {
  store<u8>(changetype<usize>(oneByte), value);
  return oneByte;
}

// Value of four hex digits at `p`, or -1.
function hex4(p: usize): i32 {
  let value = 0;
  for (let i: usize = 0; i < 4; i++) {
    const c = load<u8>(p + i) as i32;
    let digit = -1;
    if (c >= 0x30 && c <= 0x39) digit = c - 0x30;
    else if (c >= 0x61 && c <= 0x66) digit = c - 0x57;
    else if (c >= 0x41 && c <= 0x46) digit = c - 0x37;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

// A gauge name: 1 to 64 bytes of a-z, 0-9 and _ (safe as an Envoy and a Prometheus stat name).
function isStatName(value: ArrayBuffer): bool {
  const size = value.byteLength;
  if (size < 1 || size > 64) return false;
  const base = changetype<usize>(value);
  for (let i = 0; i < size; i++) {
    const c = load<u8>(base + i);
    if (!((c >= 0x61 && c <= 0x7a) || (c >= 0x30 && c <= 0x39) || c == 0x5f)) return false;
  }
  return true;
}
