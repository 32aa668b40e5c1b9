import { describe, expect, test } from "vitest";
import { type HttpCall, ProxyWasmHost, WasmResult } from "../support/proxy-wasm-host.ts";
import { prng } from "./prng.ts";

const SENT = "wasmcustom.lastcall_reports_sent";
const FAILED = "wasmcustom.lastcall_reports_failed";
const body = (call: HttpCall) => JSON.parse(call.body) as Record<string, unknown>;
const reasons = (host: ProxyWasmHost) => host.calls.map((call) => body(call).reason);

/** The agent's answer to a report: 200, `x-lastcall-draining` and maybe `x-lastcall-probe`; a body for humans. */
function answer(call: HttpCall, draining: boolean, probe?: string): void {
  const headers: [string, string][] = [["x-lastcall-draining", draining ? "1" : "0"]];
  if (probe !== undefined) headers.push(["x-lastcall-probe", probe]);
  call.respond(200, JSON.stringify({ draining }), headers);
}

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
    expect(call!.body).not.toContain("probe");
    expect(host.metric(SENT)).toBe(1);
    answer(call!, false);
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

  test("with a token, every report carries x-lastcall-token; without one, no such header", () => {
    const token = "s3cr3t-T0k3n_~!#$%&'*+.^`|";
    const host = new ProxyWasmHost();
    const vms = [host.createVm({ configuration: JSON.stringify({ token }) }), host.createVm({ configuration: JSON.stringify({ token }) })];
    vms[0]!.tick();
    answer(host.calls[0]!, true, "9"); // drain_ack and probe
    const id = vms[1]!.createStream(); // busy
    vms[1]!.endStream(id); // zero
    vms[1]!.tick();
    expect(reasons(host)).toEqual(["heartbeat", "drain_ack", "probe", "busy", "zero", "heartbeat"]);
    for (const call of host.calls) {
      expect(call.headers).toEqual([
        [":method", "POST"], [":path", "/v1/inflight"], [":authority", "lastcall"], ["content-type", "application/json"],
        ["x-lastcall-token", token],
      ]);
    }
    const plain = new ProxyWasmHost();
    plain.createVm({ configuration: '{"token":""}' }).tick();
    expect(plain.calls[0]!.headers.map(([name]) => name)).toEqual([":method", ":path", ":authority", "content-type"]);
  });

  test("a report whose counter read fails is not sent, and is counted failed", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm();
    host.beforeHostCall = ({ call, key }) =>
      call === "proxy_get_shared_data" && key === "lastcall.inflight" ? WasmResult.InternalFailure : undefined;
    vm.tick();
    expect(host.calls).toHaveLength(0);
    expect(host.metric(FAILED)).toBe(1);
  });

  test("failed report calls are counted, never retried", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm();
    vm.tick();
    host.calls[0]!.respond(500, "oops");
    vm.tick();
    host.calls[1]!.fail();
    vm.tick();
    host.calls[2]!.respond(200, "not json", [["x-lastcall-draining", "0"]]);
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
    answer(first!, true);
    expect(host.calls).toHaveLength(3);
    expect(host.calls[2]!.vm).toBe(vms[0]);
    expect(body(host.calls[2]!)).toMatchObject({ seq: 3, inflight: 3, draining: true, reason: "drain_ack" });
    answer(second!, true); // already known: no second ack
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
    answer(host.calls[0]!, true);
    expect(body(host.calls[1]!)).toMatchObject({ seq: 0, inflight: 0, draining: true, reason: "drain_ack" });
  });

  test("only a 200 with x-lastcall-draining: 1 starts a drain; the body is not read", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm();
    const answers: [number, string, [string, string][]][] = [
      [503, '{"draining":true}', [["x-lastcall-draining", "1"]]],
      [200, '{"draining":true}', []],
      [200, '{"draining":true}', [["x-lastcall-draining", "0"]]],
      [200, "", [["x-lastcall-draining", "true"]]],
      [200, "", [["x-lastcall-draining", "11"]]],
      [200, "", [["x-lastcall-draining", ""]]],
      [200, "", [["x-lastcall-draining", " 1"]]],
    ];
    for (const [status, text, headers] of answers) {
      vm.tick();
      host.calls.at(-1)!.respond(status, text, headers);
    }
    expect(host.calls).toHaveLength(answers.length);
    expect(host.sharedData("lastcall.draining")!.value).toEqual(new Uint8Array([0]));
    vm.endStream(vm.createStream());
    expect(host.calls).toHaveLength(answers.length); // not draining: no transition reports
    vm.tick();
    host.calls.at(-1)!.respond(200, "", [["x-lastcall-draining", "1"]]);
    expect(reasons(host).at(-1)).toBe("drain_ack");
  });

  test("the flag exists from configure, never cleared: a later VM and a 'draining: 0' keep it set", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm();
    expect(host.sharedData("lastcall.draining")!.value).toEqual(new Uint8Array([0]));
    vm.tick();
    answer(host.calls[0]!, true);
    const late = host.createVm(); // configure finds the flag and keeps it
    expect(host.sharedData("lastcall.draining")!.value).toEqual(new Uint8Array([1]));
    late.tick();
    answer(host.calls.at(-1)!, false);
    late.tick();
    expect(body(host.calls.at(-1)!)).toMatchObject({ reason: "heartbeat", draining: true });
    expect(reasons(host).filter((r) => r === "drain_ack")).toHaveLength(1);
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
          answer(host.calls.at(-1)!, true);
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

describe("probes", () => {
  test("a probe answer gets a probe report with the id after reason, the flag and the count read now", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm({ configuration: '{"instance":"x"}' });
    const ids = [vm.createStream(), vm.createStream()];
    vm.tick();
    vm.endStream(ids[0]!);
    answer(host.calls[0]!, false, "42");
    expect(host.calls).toHaveLength(2);
    expect(host.calls[1]!.body).toBe('{"instance":"x","epoch":0,"seq":3,"inflight":1,"draining":false,"reason":"probe","probe":42}');
    answer(host.calls[1]!, false, "9007199254740991"); // the agent may probe again: answered again
    expect(body(host.calls[2]!)).toMatchObject({ reason: "probe", probe: 9007199254740991, seq: 3, inflight: 1 });
    answer(host.calls[2]!, false);
    expect(host.calls).toHaveLength(3);
    expect(host.metric(SENT)).toBe(3);
    vm.endStream(ids[1]!);
  });

  test.each([
    ["0"], ["-1"], ["+1"], ["01"], ["1.5"], ["1e3"], ["0x10"], [" 7"], ["7 "], [""], ["abc"], ["7,8"],
    ["9007199254740992"], ["18446744073709551617"], ["12345678901234567"],
  ])("an invalid probe header %j is ignored", (probe) => {
    const host = new ProxyWasmHost();
    const vm = host.createVm();
    vm.tick();
    answer(host.calls[0]!, false, probe);
    expect(host.calls).toHaveLength(1);
    expect(host.metric(FAILED)).toBe(0);
  });

  test("a probe on an answer other than 200 is ignored", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm();
    vm.tick();
    host.calls[0]!.respond(503, "", [["x-lastcall-draining", "1"], ["x-lastcall-probe", "5"]]);
    expect(host.calls).toHaveLength(1);
  });

  test("draining and a probe in one answer: drain_ack first, then the probe report; only the ack is once", () => {
    const host = new ProxyWasmHost();
    const [a, b] = [host.createVm(), host.createVm()];
    b.createStream();
    a.tick();
    b.tick();
    answer(host.calls[0]!, true, "7");
    expect(host.calls.slice(2).map(body)).toEqual([
      { instance: "", epoch: 0, seq: 1, inflight: 1, draining: true, reason: "drain_ack" },
      { instance: "", epoch: 0, seq: 1, inflight: 1, draining: true, reason: "probe", probe: 7 },
    ]);
    answer(host.calls[1]!, true, "8"); // b's write did not set the flag: only the probe report
    expect(host.calls.slice(4).map(body)).toEqual([
      { instance: "", epoch: 0, seq: 1, inflight: 1, draining: true, reason: "probe", probe: 8 },
    ]);
  });

  // Another worker runs between two host calls of a report: the count must be read after the flag,
  // so a report that says draining never carries a count from before the drain (a false zero).
  test.each([["heartbeat", "proxy_on_tick"], ["probe", "proxy_on_http_call_response"]])("a %s reads the flag, THEN the counter", (reason, callback) => {
    const host = new ProxyWasmHost();
    const [a, b, c] = [host.createVm(), host.createVm(), host.createVm()];
    a.tick();
    c.tick();
    const [aCall, cCall] = host.calls;
    let raced = false;
    host.beforeHostCall = ({ vm, call, key, callback: running }) => {
      if (raced || vm !== a || running !== callback || call !== "proxy_get_shared_data" || key !== "lastcall.draining") return;
      raced = true;
      b.createStream(); // 0 → 1 while not draining: no busy report
      answer(cCall!, true); // the drain starts: c acks with the count it reads after setting the flag
    };
    if (reason === "heartbeat") a.tick();
    else answer(aCall!, false, "3");
    expect(raced).toBe(true);
    expect(host.calls.slice(2).map(body)).toEqual([
      { instance: "", epoch: 0, seq: 1, inflight: 1, draining: true, reason: "drain_ack" },
      { instance: "", epoch: 0, seq: 1, inflight: 1, draining: true, reason, ...(reason === "probe" ? { probe: 3 } : {}) },
    ]);
  });
});
