// One plugin instance per VM: configuration, metrics, heartbeats and the reports to the agent.
import {
  Buffer, HeaderMap, LogLevel, MetricType, Result, proxy_get_buffer_bytes,
  proxy_get_header_map_value, proxy_get_property, proxy_http_call, proxy_increment_metric, proxy_log,
  proxy_set_tick_period_milliseconds,
} from "./abi";
import { Config, configErrorLine, parseConfig } from "./config";
import {
  defineGauge, defineMetric, draining, learnDraining, pushing, readCount, takeFinished,
} from "./count";
import { appendHolders, parseHolderCount } from "./holders";
import { Bytes, OUT_PTR, OUT_SIZE, OUT_U32, freeHostBlock, takeHostBytes, utf8 } from "./memory";

/** The `root_id` the Envoy plugin configuration must use. */
export const ROOT_ID = "lastcall_inflight";

// Metric ids are per VM: defined by the first root context to configure.
let metricsDefined = false;
let streamsTotal: u32 = 0;
let reportsSent: u32 = 0;
let reportsFailed: u32 = 0;

function defineMetrics(): void {
  if (metricsDefined) return;
  metricsDefined = true;
  streamsTotal = defineMetric(MetricType.Counter, "lastcall_streams_total") as u32;
  reportsSent = defineMetric(MetricType.Counter, "lastcall_reports_sent") as u32;
  reportsFailed = defineMetric(MetricType.Counter, "lastcall_reports_failed") as u32;
}

// The process-wide count now; -1 (and one failed report counted) if the host failed the read.
function countOrFail(): i64 {
  const count = readCount();
  if (count < 0) proxy_increment_metric(reportsFailed, 1);
  return count;
}

// Adds the streams this VM finished since the last heartbeat to `lastcall_streams_total`.
function flushStreamsTotal(): void {
  const n = takeFinished();
  if (n > 0) proxy_increment_metric(streamsTotal, n as i64);
}

/**
 * This VM's id in reports (`"vm"`), given by the agent in the answer to its first report
 * (`x-lastcall-vm`): unique among the VMs of every Envoy the agent runs. (The clock the worker VMs
 * configure at is not: two of them read the same microsecond in a few percent of starts.)
 */
let vmId = "";

/** Whether this VM's `drain_ack` went out (each VM acks once). */
let acked = false;

/** The root this VM reports through (the latest configured one that reports); null when none. */
let reporter: Root | null = null;

/** Forgets a deleted root; another reporting root of the VM takes over reports. */
export function forgetRoot(root: Root, others: Root[]): void {
  if (reporter !== root) return;
  reporter = null;
  for (let i = 0; i < others.length; i++) if (others[i] !== root && others[i].reporting()) reporter = others[i];
}

/**
 * While this VM pushes (it knows of a drain whose floor is about to pass), a stream that moved
 * the process-wide count from 0 to 1 (`busy`) or from 1 to 0 (`zero`) is reported at once; the
 * count is read right after the move.
 */
export function pushTransition(started: bool): void {
  const root = reporter;
  if (root === null) return;
  const count = countOrFail();
  if (started ? count == 1 : count == 0) root.report(started ? "busy" : "zero", count as u64, 0);
}

function log(level: LogLevel, line: Bytes): void {
  proxy_log(level, line.ptr(), line.length);
}

// Header pairs in the proxy-wasm wire format: count, (key size, value size)*, then "key\0value\0"*.
function serializePairs(pairs: ArrayBuffer[]): ArrayBuffer {
  const out = new Bytes();
  const count = pairs.length / 2;
  out.raw(changetype<usize>(u32Bytes(count)), 4);
  for (let i = 0; i < pairs.length; i++) out.raw(changetype<usize>(u32Bytes(pairs[i].byteLength)), 4);
  for (let i = 0; i < pairs.length; i++) out.buf(pairs[i]).raw(changetype<usize>(u32Bytes(0)), 1);
  return out.toArrayBuffer();
}

const u32Scratch = new ArrayBuffer(4);
function u32Bytes(value: u32): ArrayBuffer {
  store<u32>(changetype<usize>(u32Scratch), value);
  return u32Scratch;
}

const noTrailers = serializePairs([]);
const PATH = utf8(":path");
const STATUS = utf8(":status");
const OK_STATUS = utf8("200");
const DRAINING_HEADER = utf8("x-lastcall-draining");
const QUIET_HEADER = utf8("x-lastcall-quiet");
const PROBE_HEADER = utf8("x-lastcall-probe");
const HOLDERS_HEADER = utf8("x-lastcall-holders");
const VM_HEADER = utf8("x-lastcall-vm");
const MAX_PROBE: u64 = 9007199254740991; // 2^53 - 1: exact for a JavaScript agent

// Looks up one header of the agent's answer. When true, OUT_PTR/OUT_SIZE hold the value, which the
// caller reads in place and frees with `freeHostBlock(load<u32>(OUT_PTR))`.
function answerHeader(name: ArrayBuffer): bool {
  store<u32>(OUT_PTR, 0);
  store<u32>(OUT_SIZE, 0);
  const result = proxy_get_header_map_value(HeaderMap.HttpCallResponseHeaders, changetype<usize>(name), name.byteLength, OUT_PTR, OUT_SIZE);
  if (result == Result.Ok) return true;
  freeHostBlock(load<u32>(OUT_PTR) as usize);
  return false;
}

// Whether the answer says `name: 1` (exactly "1"; absent, "0" or anything else: no).
function answerSays(name: ArrayBuffer): bool {
  if (!answerHeader(name)) return false;
  const ptr = load<u32>(OUT_PTR) as usize;
  const yes = load<u32>(OUT_SIZE) == 1 && load<u8>(ptr) == 0x31;
  freeHostBlock(ptr);
  return yes;
}

// The value of the answer's header `name` (`x-lastcall-probe`, `x-lastcall-vm`): decimal digits, no
// leading zero, 1 to 2^53 - 1; 0 when absent or anything else.
function answerId(name: ArrayBuffer): u64 {
  if (!answerHeader(name)) return 0;
  const ptr = load<u32>(OUT_PTR) as usize;
  const size = load<u32>(OUT_SIZE) as usize;
  let id: u64 = 0;
  if (size >= 1 && size <= 16 && load<u8>(ptr) != 0x30) {
    for (let i: usize = 0; i < size; i++) {
      const digit = (load<u8>(ptr + i) as i32) - 0x30;
      if (digit < 0 || digit > 9) { id = 0; break; }
      id = id * 10 + (digit as u64);
    }
    if (id > MAX_PROBE) id = 0;
  }
  freeHostBlock(ptr);
  return id;
}

// How many holders the answer asks for (`x-lastcall-holders`, 1 to 32); 0 when absent or anything else.
function answerHolders(): i32 {
  if (!answerHeader(HOLDERS_HEADER)) return 0;
  const ptr = load<u32>(OUT_PTR) as usize;
  const n = parseHolderCount(ptr, load<u32>(OUT_SIZE) as usize);
  freeHostBlock(ptr);
  return n;
}

/** The root context of one plugin in one VM. */
export class Root {
  /** This root's context id (the effective context goes back to it after the holders are read). */
  readonly id: u32;
  /** Settings from the last accepted `proxy_on_configure`. */
  config: Config = new Config();
  private headers: ArrayBuffer = new ArrayBuffer(0);

  constructor(id: u32) {
    this.id = id;
  }

  /** Parses and applies the plugin configuration; false (and one error line) if refused. */
  configure(size: u32): bool {
    defineMetrics();
    let text = new ArrayBuffer(0);
    if (size > 0) {
      store<u32>(OUT_PTR, 0);
      store<u32>(OUT_SIZE, 0);
      const result = proxy_get_buffer_bytes(Buffer.PluginConfiguration, 0, size, OUT_PTR, OUT_SIZE);
      text = takeHostBytes();
      if (result != Result.Ok) text = new ArrayBuffer(0);
    }
    const config = parseConfig(text);
    if (config.error.length == 0) checkRootId(config);
    if (config.error.length > 0) {
      log(LogLevel.Error, configErrorLine(config));
      return false;
    }
    this.config = config;
    const pairs = [
      utf8(":method"), utf8("POST"), utf8(":path"), utf8("/v1/inflight"),
      utf8(":authority"), config.agentAuthority, utf8("content-type"), utf8("application/json"),
    ];
    if (config.token.byteLength > 0) {
      pairs.push(utf8("x-lastcall-token"));
      pairs.push(config.token);
    }
    this.headers = serializePairs(pairs);
    if (!defineGauge(config.gauge, config.epoch)) {
      log(LogLevel.Error, new Bytes().str("lastcall: cannot define the in-flight gauge; refusing the configuration"));
      return false;
    }
    if (this.reporting()) reporter = this;
    // The tick also adds finished streams to `lastcall_streams_total` when heartbeats are off.
    proxy_set_tick_period_milliseconds(this.reporting() && config.heartbeatMs > 0 ? config.heartbeatMs : 1000);
    return true;
  }

  /** Whether this plugin sends reports (its `agent_cluster` is not empty). */
  reporting(): bool {
    return this.config.agentCluster.byteLength > 0;
  }

  /** Timer: flushes `lastcall_streams_total`, then the heartbeat reports the count. */
  tick(): void {
    flushStreamsTotal();
    if (this.reporting() && this.config.heartbeatMs > 0) this.reportNow("heartbeat", 0);
  }

  /** Whether `:path` (query string removed) of the current request matches `exclude_paths`. */
  isExcluded(): bool {
    const paths = this.config.excludePaths;
    if (paths.length == 0) return false;
    const name = PATH;
    store<u32>(OUT_PTR, 0);
    store<u32>(OUT_SIZE, 0);
    const result = proxy_get_header_map_value(HeaderMap.RequestHeaders, changetype<usize>(name), name.byteLength, OUT_PTR, OUT_SIZE);
    const path = takeHostBytes();
    if (result != Result.Ok) return false;
    const base = changetype<usize>(path);
    let size = 0;
    while (size < path.byteLength && load<u8>(base + size) != 0x3f) size++; // up to '?'
    for (let i = 0; i < paths.length; i++) {
      const entry = paths[i];
      const entrySize = entry.byteLength;
      const prefix = load<u8>(changetype<usize>(entry) + entrySize - 1) == 0x2a; // trailing '*'
      const compared = prefix ? entrySize - 1 : entrySize;
      if (prefix ? size < compared : size != compared) continue;
      if (memory.compare(base, changetype<usize>(entry), compared) == 0) return true;
    }
    return false;
  }

  /**
   * Handles the agent's answer to a report: counts failures; on 200, learns from
   * `x-lastcall-draining: 1` that a drain started (`x-lastcall-quiet: 1` beside it: not pushing
   * yet; this VM acks it once it pushes, with the gauge read then), then answers
   * `x-lastcall-probe: <id>` with a probe report and, once it knows of a drain,
   * `x-lastcall-holders: <n>` with a holders report. The body is not read.
   */
  onHttpCallResponse(): void {
    const name = STATUS;
    store<u32>(OUT_PTR, 0);
    store<u32>(OUT_SIZE, 0);
    const found = proxy_get_header_map_value(HeaderMap.HttpCallResponseHeaders, changetype<usize>(name), name.byteLength, OUT_PTR, OUT_SIZE);
    const status = takeHostBytes();
    if (found != Result.Ok || status.byteLength != 3 || memory.compare(changetype<usize>(status), changetype<usize>(OK_STATUS), 3) != 0) {
      proxy_increment_metric(reportsFailed, 1);
      return;
    }
    // The VM's id, given once by the agent (the first one taken stays), is in every report after.
    if (vmId.length == 0) {
      const id = answerId(VM_HEADER);
      if (id != 0) vmId = id.toString();
    }
    // Every VM acks the drain once, when it starts pushing, with the count read then: a move to
    // zero this VM made before (and so did not push) is part of that count.
    if (answerSays(DRAINING_HEADER)) {
      learnDraining(answerSays(QUIET_HEADER));
      // A failed ack goes out with the next answer that lets it push.
      if (!acked && pushing) acked = this.reportNow("drain_ack", 0);
    }
    const probe = answerId(PROBE_HEADER);
    if (probe != 0) this.reportNow("probe", probe);
    // Holders are named during a drain only: an ask on an answer to a VM that knows of none is ignored.
    const holders = answerHolders();
    if (holders > 0 && draining) this.reportNow("holders", 0, holders);
  }

  // Reads the process-wide count and reports it; a failed read sends nothing. True if sent.
  private reportNow(reason: string, probe: u64, holders: i32 = 0): bool {
    const count = countOrFail();
    return count >= 0 && this.report(reason, count as u64, probe, holders);
  }

  /**
   * Sends one report of `count` to the agent (with this VM's `holders` oldest live streams when
   * not 0); true if the call was dispatched.
   */
  report(reason: string, count: u64, probe: u64, holders: i32 = 0): bool {
    const config = this.config;
    const cluster = config.agentCluster;
    if (cluster.byteLength == 0) return false;
    const body = new Bytes().str('{"instance":"').buf(config.instanceJson)
      .str('","epoch":').num(config.epoch).str(',"inflight":').num(count)
      .str(!draining ? ',"draining":false' : pushing ? ',"draining":true' : ',"draining":true,"quiet":true')
      .str(',"reason":"').str(reason).str('"');
    if (probe != 0) body.str(',"probe":').num(probe);
    if (vmId.length > 0) body.str(',"vm":"').str(vmId).str('"');
    if (holders > 0) appendHolders(body, holders, this.id);
    body.str("}");
    const result = proxy_http_call(
      changetype<usize>(cluster), cluster.byteLength, changetype<usize>(this.headers), this.headers.byteLength,
      body.ptr(), body.length, changetype<usize>(noTrailers), noTrailers.byteLength, config.pushTimeoutMs, OUT_U32,
    );
    proxy_increment_metric(result == Result.Ok ? reportsSent : reportsFailed, 1);
    return result == Result.Ok;
  }
}

function checkRootId(config: Config): void {
  const path = utf8("plugin_root_id");
  store<u32>(OUT_PTR, 0);
  store<u32>(OUT_SIZE, 0);
  const result = proxy_get_property(changetype<usize>(path), path.byteLength, OUT_PTR, OUT_SIZE);
  const rootId = takeHostBytes();
  const expected = utf8(ROOT_ID);
  if (result == Result.Ok && rootId.byteLength == expected.byteLength &&
    memory.compare(changetype<usize>(rootId), changetype<usize>(expected), expected.byteLength) == 0) return;
  config.error = 'root_id must be "' + ROOT_ID + '"';
  config.errorValue = rootId;
}
