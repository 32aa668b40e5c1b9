// Parsers of Envoy's admin stats, on output captured from Envoy 1.40 (test/fixtures/stats-*.json).
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { activeConnections, activeRequests, parseStatsJson } from "../../agent/envoy/stats.ts";

const fixture = (name: string) =>
  readFileSync(new URL(`../fixtures/${name}`, import.meta.url), "utf8");

describe("parseStatsJson", () => {
  it("reads counters and gauges", () => {
    expect(parseStatsJson(fixture("stats-rq-active.json"))).toEqual([
      { name: "http.admin.downstream_rq_active", value: 1 },
      { name: "http.egress.downstream_rq_active", value: 1 },
      { name: "http.ingress.downstream_rq_active", value: 2 },
    ]);
  });

  it("reads an empty answer", () => {
    expect(parseStatsJson('{"stats":[]}')).toEqual([]);
  });

  it("skips histograms", () => {
    const text =
      '{"stats":[{"name":"a","value":1},{"histograms":{"supported_quantiles":[0.5],"computed_quantiles":[]}}]}';
    expect(parseStatsJson(text)).toEqual([{ name: "a", value: 1 }]);
  });

  it.each(["", "not json", "[]", '{"server":"x"}', "null"])("refuses %j", (text) => {
    expect(() => parseStatsJson(text)).toThrow(SyntaxError);
  });
});

describe("activeRequests", () => {
  const stats = parseStatsJson(fixture("stats-rq-active.json"));

  it("sums every connection manager except admin", () => {
    expect(activeRequests(stats)).toBe(3);
  });

  it("sums only the given stat prefixes", () => {
    expect(activeRequests(stats, new Set(["ingress"]))).toBe(2);
    expect(activeRequests(stats, new Set(["ingress", "egress"]))).toBe(3);
    expect(activeRequests(stats, new Set())).toBe(0);
  });

  it("never counts admin, even when asked", () => {
    expect(activeRequests(stats, new Set(["admin"]))).toBe(0);
  });

  it("ignores the connection stats", () => {
    expect(activeRequests(parseStatsJson(fixture("stats-cx-active.json")))).toBe(0);
  });
});

describe("activeConnections", () => {
  const stats = parseStatsJson(fixture("stats-cx-active.json"));

  it("sums listeners once each: no per-worker copies, no admin (nor its main_thread copy)", () => {
    // ingress 2 (two held requests) + egress_listener 2 (one held, one idle keep-alive).
    expect(activeConnections(stats)).toBe(4);
  });

  it("leaves out the given listener addresses", () => {
    expect(activeConnections(stats, ["127.0.0.1_18123"])).toBe(2);
    expect(activeConnections(stats, ["egress_listener"])).toBe(2);
  });

  it("is undefined when no listener stat exists (Istio then exits at once)", () => {
    expect(activeConnections(parseStatsJson(fixture("stats-rq-active.json")))).toBeUndefined();
    expect(activeConnections([{ name: "listener.admin.downstream_cx_active", value: 1 }]))
      .toBeUndefined();
  });
});
