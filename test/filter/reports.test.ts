import { describe, expect, test } from "vitest";
import { type HttpCall, ProxyWasmHost } from "../support/proxy-wasm-host.ts";
import { prng } from "./prng.ts";

const SENT = "wasmcustom.lastcall_reports_sent";
const FAILED = "wasmcustom.lastcall_reports_failed";
const body = (call: HttpCall) => JSON.parse(call.body) as Record<string, unknown>;

describe("reports", () => {
  test("a heartbeat is one POST /v1/inflight to the agent cluster with the current count", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm({ configuration: '{"instance":"pod-\\"a\\"","epoch":4,"agent_authority":"agent.local","push_timeout_ms":250}' });
    expect(vm.tickPeriodMs).toBe(1000);
    const ids = [vm.createStream(), vm.createStream()];
    vm.tick();
    expect(host.calls).toHaveLength(1);
    const [call] = host.calls;
    expect(call!.cluster).toBe("lastcall_agent");
    expect(call!.timeoutMs).toBe(250);
    expect(call!.headers).toEqual([
      [":method", "POST"], [":path", "/v1/inflight"], [":authority", "agent.local"], ["content-type", "application/json"],
    ]);
    expect(body(call!)).toEqual({ instance: 'pod-"a"', epoch: 4, seq: 2, inflight: 2, draining: false, reason: "heartbeat" });
    expect(host.metric(SENT)).toBe(1);
    call!.respond(200, '{"draining":false}');
    expect(host.metric(FAILED)).toBe(0);
    for (const id of ids) vm.endStream(id);
    expect(host.calls).toHaveLength(1);
  });

  test("no heartbeat timer when heartbeat_ms is 0 or reports are disabled", () => {
    const host = new ProxyWasmHost();
    expect(host.createVm({ configuration: '{"heartbeat_ms":0}' }).tickPeriodMs).toBe(0);
    const silent = host.createVm({ configuration: '{"agent_cluster":"","heartbeat_ms":500}' });
    expect(silent.tickPeriodMs).toBe(0);
    silent.tick();
    expect(host.calls).toHaveLength(0);
  });

  test("failed report calls are counted, never retried", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm();
    vm.tick();
    host.calls[0]!.respond(500, "oops");
    vm.tick();
    host.calls[1]!.fail();
    vm.tick();
    host.calls[2]!.respond(200, "not json");
    expect(host.metric(SENT)).toBe(3);
    expect(host.metric(FAILED)).toBe(2);
    const missing = host.createVm({ configuration: '{"agent_cluster":"no_such_cluster"}' });
    missing.tick(); // Envoy answers BadArgument for an unknown cluster: nothing dispatched
    expect(host.calls).toHaveLength(3);
    expect(host.metric(SENT)).toBe(3);
    expect(host.metric(FAILED)).toBe(3);
  });
});

describe("draining", () => {
  test("the first VM to learn of the drain acks it; then every move to and from zero is reported", () => {
    const host = new ProxyWasmHost();
    const vms = [host.createVm(), host.createVm(), host.createVm()];
    const streams = vms.map((vm) => [vm, vm.createStream()] as const);
    vms[0]!.tick();
    vms[1]!.tick();
    const [first, second] = host.calls;
    first!.respond(200, '{ "draining" : true }');
    expect(host.calls).toHaveLength(3);
    expect(host.calls[2]!.vm).toBe(vms[0]);
    expect(body(host.calls[2]!)).toMatchObject({ seq: 3, inflight: 3, draining: true, reason: "drain_ack" });
    second!.respond(200, '{"draining":true}'); // already known: no second ack
    expect(host.calls).toHaveLength(3);

    streams[0]![0].endStream(streams[0]![1]);
    streams[1]![0].endStream(streams[1]![1]);
    expect(host.calls).toHaveLength(3); // 3→2→1: no transition
    streams[2]![0].endStream(streams[2]![1]);
    expect(host.calls).toHaveLength(4);
    expect(host.calls[3]!.vm).toBe(vms[2]); // the worker whose CAS made 1→0
    expect(body(host.calls[3]!)).toMatchObject({ seq: 6, inflight: 0, draining: true, reason: "zero" });

    const late = vms[1]!.createStream();
    expect(body(host.calls[4]!)).toMatchObject({ seq: 7, inflight: 1, reason: "busy" });
    vms[1]!.requestHeaders(late, { ":path": "/" });
    vms[1]!.endStream(late);
    expect(body(host.calls[5]!)).toMatchObject({ seq: 8, inflight: 0, reason: "zero" });
    vms[0]!.tick();
    expect(body(host.calls[6]!)).toMatchObject({ seq: 8, inflight: 0, draining: true, reason: "heartbeat" });
  });

  test("a drain learned at zero is acked with inflight 0", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm();
    vm.tick();
    host.calls[0]!.respond(200, '{"draining":true}');
    expect(body(host.calls[1]!)).toMatchObject({ seq: 0, inflight: 0, draining: true, reason: "drain_ack" });
  });

  test("a failed answer does not start a drain, and a 200 without draining:true does not either", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm();
    vm.tick();
    host.calls[0]!.respond(503, '{"draining":true}');
    vm.tick();
    host.calls[1]!.respond(200, '{"draining":"true"}');
    const id = vm.createStream();
    vm.endStream(id);
    expect(host.calls).toHaveLength(2);
  });

  test("in random interleavings the transition reports alternate busy/zero with rising seq", () => {
    for (const seed of [11, 12, 13]) {
      const host = new ProxyWasmHost();
      const random = prng(seed);
      const vms = Array.from({ length: 4 }, () => host.createVm({ configuration: '{"exclude_paths":["/healthz"]}' }));
      const live: [typeof vms[number], number][] = [];
      let drainAt = 1000 + Math.floor(random() * 1000);
      for (let step = 0; step < 4000; step++) {
        if (step === drainAt) {
          vms[step % 4]!.tick();
          host.calls.at(-1)!.respond(200, '{"draining":true}');
          drainAt = -1;
        }
        // Keep the count low so it crosses zero often.
        if (random() < 0.5 - live.length * 0.08) {
          const vm = vms[Math.floor(random() * 4)]!;
          const id = vm.createStream();
          if (random() < 0.2) vm.requestHeaders(id, { ":path": "/healthz" });
          live.push([vm, id]);
        } else if (live.length > 0) {
          const [vm, id] = live.splice(Math.floor(random() * live.length), 1)[0]!;
          vm.endStream(id);
        }
      }
      for (const [vm, id] of live.splice(0)) vm.endStream(id);
      const reports = host.calls.map(body);
      const ack = reports.findIndex((r) => r.reason === "drain_ack");
      expect(reports.filter((r) => r.reason === "drain_ack")).toHaveLength(1);
      const transitions = reports.slice(ack + 1);
      expect(transitions.length).toBeGreaterThan(50);
      let previousSeq = reports[ack]!.seq as number;
      let expectNext = reports[ack]!.inflight === 0 ? "busy" : "zero";
      for (const report of transitions) {
        expect(report.seq as number).toBeGreaterThan(previousSeq);
        previousSeq = report.seq as number;
        if (report.inflight !== 0 && report.inflight !== 1) continue;
        expect(report.reason).toBe(expectNext);
        expect(report.inflight).toBe(report.reason === "zero" ? 0 : 1);
        expectNext = report.reason === "zero" ? "busy" : "zero";
      }
      expect(transitions.at(-1)).toMatchObject({ reason: "zero", inflight: 0, seq: host.inflight()!.version, draining: true });
      expect(host.metric("wasmcustom.lastcall_inflight")).toBe(0);
    }
  });
});
