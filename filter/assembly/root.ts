// One plugin instance per VM: configuration, metrics, heartbeats and the reports to the agent.
import {
  Buffer, HeaderMap, LogLevel, MetricType, Result, proxy_define_metric, proxy_get_buffer_bytes,
  proxy_get_header_map_value, proxy_get_property, proxy_http_call, proxy_increment_metric, proxy_log,
  proxy_set_tick_period_milliseconds,
} from "./abi";
import { Config, configErrorLine, parseConfig } from "./config";
import { Bytes, OUT_PTR, OUT_SIZE, OUT_U32, takeHostBytes, utf8 } from "./memory";
import {
  addInflight, inflightCount, inflightVersion, initShared, readDraining, readInflight, setDraining,
} from "./shared";

/** The `root_id` the Envoy plugin configuration must use. */
export const ROOT_ID = "lastcall_inflight";

// Metric ids are per VM: defined by the first root context to configure.
let metricsDefined = false;
let inflightGauge: u32 = 0;
let streamsTotal: u32 = 0;
let reportsSent: u32 = 0;
let reportsFailed: u32 = 0;

function defineMetric(type: MetricType, name: string): u32 {
  const bytes = utf8(name);
  store<u32>(OUT_U32, 0);
  proxy_define_metric(type, changetype<usize>(bytes), bytes.byteLength, OUT_U32);
  return load<u32>(OUT_U32);
}

function defineMetrics(): void {
  if (metricsDefined) return;
  metricsDefined = true;
  inflightGauge = defineMetric(MetricType.Gauge, "lastcall_inflight");
  streamsTotal = defineMetric(MetricType.Counter, "lastcall_streams_total");
  reportsSent = defineMetric(MetricType.Counter, "lastcall_reports_sent");
  reportsFailed = defineMetric(MetricType.Counter, "lastcall_reports_failed");
}

/** Counts one finished counted stream in `lastcall_streams_total`. */
export function countStreamDone(): void {
  proxy_increment_metric(streamsTotal, 1);
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
const DRAINING_NAME = utf8('"draining"');
const TRUE = utf8("true");

// Whether `body` has `"draining"` followed by `: true` (whitespace allowed).
function saysDraining(body: ArrayBuffer): bool {
  const key = DRAINING_NAME;
  const base = changetype<usize>(body);
  const size = body.byteLength;
  for (let i = 0; i + key.byteLength <= size; i++) {
    if (memory.compare(base + i, changetype<usize>(key), key.byteLength) != 0) continue;
    let p = i + key.byteLength;
    while (p < size && load<u8>(base + p) <= 0x20) p++;
    if (p >= size || load<u8>(base + p) != 0x3a) continue; // :
    p++;
    while (p < size && load<u8>(base + p) <= 0x20) p++;
    return size - p >= 4 && memory.compare(base + p, changetype<usize>(TRUE), 4) == 0;
  }
  return false;
}

/** The root context of one plugin in one VM. */
export class Root {
  /** Settings from the last accepted `proxy_on_configure`. */
  config: Config = new Config();
  private headers: ArrayBuffer = new ArrayBuffer(0);

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
    initShared();
    const reporting = config.agentCluster.byteLength > 0;
    proxy_set_tick_period_milliseconds(reporting ? config.heartbeatMs : 0);
    return true;
  }

  /** Heartbeat: reports the current count. */
  tick(): void {
    readInflight();
    this.report("heartbeat", inflightCount, inflightVersion, readDraining());
  }

  /** Applies ±1 to the counter and the gauge; while draining, reports a move to or from zero. */
  changeInflight(delta: i64): void {
    if (!addInflight(delta)) return;
    proxy_increment_metric(inflightGauge, delta);
    const count = inflightCount;
    const version = inflightVersion;
    const transition = delta > 0 ? count == 1 : count == 0;
    if (transition && readDraining()) this.report(delta > 0 ? "busy" : "zero", count, version, true);
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

  /** Handles the agent's answer to a report: counts failures, learns that a drain started. */
  onHttpCallResponse(bodySize: u32): void {
    const name = STATUS;
    store<u32>(OUT_PTR, 0);
    store<u32>(OUT_SIZE, 0);
    const found = proxy_get_header_map_value(HeaderMap.HttpCallResponseHeaders, changetype<usize>(name), name.byteLength, OUT_PTR, OUT_SIZE);
    const status = takeHostBytes();
    if (found != Result.Ok || status.byteLength != 3 || memory.compare(changetype<usize>(status), changetype<usize>(OK_STATUS), 3) != 0) {
      proxy_increment_metric(reportsFailed, 1);
      return;
    }
    store<u32>(OUT_PTR, 0);
    store<u32>(OUT_SIZE, 0);
    const result = proxy_get_buffer_bytes(Buffer.HttpCallResponseBody, 0, bodySize, OUT_PTR, OUT_SIZE);
    const body = takeHostBytes();
    if (result != Result.Ok || !saysDraining(body)) return;
    // The one VM whose write set the shared flag acknowledges the drain with the current count.
    if (setDraining()) {
      readInflight();
      this.report("drain_ack", inflightCount, inflightVersion, true);
    }
  }

  private report(reason: string, count: u64, version: u64, draining: bool): void {
    const config = this.config;
    const cluster = config.agentCluster;
    if (cluster.byteLength == 0) return;
    const body = new Bytes().str('{"instance":"').buf(config.instanceJson)
      .str('","epoch":').num(config.epoch).str(',"seq":').num(version).str(',"inflight":').num(count)
      .str(draining ? ',"draining":true,"reason":"' : ',"draining":false,"reason":"').str(reason).str('"}');
    const result = proxy_http_call(
      changetype<usize>(cluster), cluster.byteLength, changetype<usize>(this.headers), this.headers.byteLength,
      body.ptr(), body.length, changetype<usize>(noTrailers), noTrailers.byteLength, config.pushTimeoutMs, OUT_U32,
    );
    proxy_increment_metric(result == Result.Ok ? reportsSent : reportsFailed, 1);
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
