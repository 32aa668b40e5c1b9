// Reports to the agent (docs/filter-protocol.md, "Reports" and "The agent's answer"): each VM's
// heartbeat and its counts, and probes answered with the gauge. The drain: draining.test.ts.
import { describe, expect, test } from "vitest";
import { ProxyWasmHost, WasmResult } from "../support/proxy-wasm-host.ts";
import {
  answer,
  body,
  FAILED,
  GAUGE,
  HEADERS,
  heartbeat,
  reasons,
  SENT,
  TOTAL,
} from "./reports-host.ts";

describe("reports", () => {
  test("a heartbeat is one POST /v1/inflight with the process-wide gauge, keys in order, no seq", () => {
    const host = new ProxyWasmHost({ clock: () => 1_795_000_000_123_456_789n });
    const configuration =
      '{"instance":"pod-\\"a\\"","epoch":4,"agent_authority":"agent.local","push_timeout_ms":250}';
    const [a, b] = [host.createVm({ configuration }), host.createVm({ configuration })];
    const ids = [b.createStream(), b.createStream(), a.createStream()];
    a.tick();
    expect(host.calls).toHaveLength(1);
    const [call] = host.calls;
    expect(call!.vm).toBe(a);
    expect(call!.cluster).toBe("lastcall_agent");
    expect(call!.timeoutMs).toBe(250);
    expect(call!.headers).toEqual([[":method", "POST"], [":path", "/v1/inflight"], [
      ":authority",
      "agent.local",
    ], ["content-type", "application/json"]]);
    expect(call!.body).toBe(
      '{"instance":"pod-\\"a\\"","epoch":4,"inflight":3,"draining":false,"reason":"heartbeat"}',
    ); // no vm: no answer gave it one yet
    expect(host.metric(SENT)).toBe(1);
    answer(call!, false);
    expect(host.metric(FAILED)).toBe(0);
    for (const id of ids.slice(0, 2)) b.endStream(id);
    a.endStream(ids[2]!);
    expect(host.calls).toHaveLength(1); // streams send nothing outside a drain
  });

  test.each([
    ['{"heartbeat_ms":250}', 250, true],
    ["", 1000, true],
    ['{"heartbeat_ms":0}', 1000, false],
    ['{"agent_cluster":"","heartbeat_ms":500}', 1000, false],
  ])("with %s the timer ticks every %i ms; heartbeat sent: %s", (configuration, period, sends) => {
    const host = new ProxyWasmHost();
    const vm = host.createVm({ configuration });
    expect(vm.configured).toBe(true);
    expect(vm.tickPeriodMs).toBe(period);
    vm.tick();
    expect(reasons(host.calls)).toEqual(sends ? ["heartbeat"] : []);
  });

  test("lastcall_streams_total is added by each VM at its tick, not per stream", () => {
    const host = new ProxyWasmHost();
    const [a, b] = [
      host.createVm({ configuration: '{"heartbeat_ms":0}' }),
      host.createVm({ configuration: '{"heartbeat_ms":200}' }),
    ];
    const moved: string[] = [];
    host.afterHostCall = ({ call, key }) => {
      if (call === "proxy_increment_metric") moved.push(key);
    };
    for (let i = 0; i < 3; i++) a.endStream(a.createStream());
    for (let i = 0; i < 2; i++) b.endStream(b.createStream());
    expect(moved).toEqual(Array(10).fill(GAUGE));
    expect(host.metric(TOTAL)).toBe(0);
    a.tick();
    expect(host.metric(TOTAL)).toBe(3);
    b.tick();
    expect(host.metric(TOTAL)).toBe(5);
    a.tick(); // nothing finished since: no increment
    expect(host.metric(TOTAL)).toBe(5);
    expect(moved.filter((key) => key === TOTAL)).toHaveLength(2);
  });

  test("with a token, every kind of report carries x-lastcall-token; without one, no such header", () => {
    const token = "s3cr3t-T0k3n_~!#$%&'*+.^`|";
    const host = new ProxyWasmHost();
    const vm = host.createVm({ configuration: JSON.stringify({ token }) });
    heartbeat(host, vm, true, "9"); // heartbeat, drain_ack, probe
    vm.endStream(vm.createStream()); // busy, zero
    expect(reasons(host.calls)).toEqual(["heartbeat", "drain_ack", "probe", "busy", "zero"]);
    for (const call of host.calls) {
      expect(call.headers).toEqual([...HEADERS, ["x-lastcall-token", token]]);
    }
    const plain = new ProxyWasmHost();
    plain.createVm({ configuration: '{"token":""}' }).tick();
    expect(plain.calls[0]!.headers).toEqual(HEADERS);
  });

  test("a report whose gauge read fails is not sent, and is counted failed", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm();
    heartbeat(host, vm, true); // heartbeat and drain_ack
    host.beforeHostCall = (
      { call },
    ) => (call === "proxy_get_metric" ? WasmResult.InternalFailure : undefined);
    vm.tick(); // heartbeat
    vm.endStream(vm.createStream()); // busy, zero
    answer(host.calls[1]!, true, "5"); // probe
    expect(reasons(host.calls)).toEqual(["heartbeat", "drain_ack"]);
    expect(host.metric(FAILED)).toBe(4);
    expect(host.metric(SENT)).toBe(2);
  });

  test("failed report calls are counted, never retried", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm();
    vm.tick();
    host.calls[0]!.respond(500, "oops", [["x-lastcall-draining", "1"], ["x-lastcall-probe", "3"]]);
    vm.tick();
    host.calls[1]!.fail();
    vm.tick();
    host.calls[2]!.respond(200, "not json", [["x-lastcall-draining", "0"]]);
    expect(host.calls).toHaveLength(3);
    expect(host.metric(SENT)).toBe(3);
    expect(host.metric(FAILED)).toBe(2);
    const missing = host.createVm({ configuration: '{"agent_cluster":"no_such_cluster"}' });
    missing.tick(); // Envoy answers BadArgument for an unknown cluster: nothing dispatched
    expect(host.calls).toHaveLength(3);
    expect(host.metric(SENT)).toBe(3);
    expect(host.metric(FAILED)).toBe(3);
  });
});

describe("probes", () => {
  test("a probe answer gets a probe report: the id after reason, the VM's flag, the gauge read now", () => {
    const host = new ProxyWasmHost({ clock: () => 1n });
    const [vm, other] = [
      host.createVm({ configuration: '{"instance":"x"}' }),
      host.createVm({ configuration: '{"instance":"x"}' }),
    ];
    const ids = [vm.createStream(), other.createStream()];
    vm.tick();
    vm.endStream(ids[0]!);
    answer(host.calls[0]!, false, "42");
    expect(host.calls).toHaveLength(2);
    expect(host.calls[1]!.body).toBe(
      '{"instance":"x","epoch":0,"inflight":1,"draining":false,"reason":"probe","probe":42}',
    );
    answer(host.calls[1]!, false, "9007199254740991"); // the agent may probe a probe report: answered again
    expect(body(host.calls[2]!)).toEqual({
      instance: "x",
      epoch: 0,
      inflight: 1,
      draining: false,
      reason: "probe",
      probe: 9007199254740991,
    });
    answer(host.calls[2]!, false);
    expect(host.calls).toHaveLength(3);
    expect(host.metric(SENT)).toBe(3);
    other.endStream(ids[1]!);
  });

  test("a probe report's count is read as it is composed: another VM's move just before the read is in it", () => {
    const host = new ProxyWasmHost();
    const [a, b] = [host.createVm(), host.createVm()];
    a.tick();
    let raced = false;
    host.beforeHostCall = ({ vm, call, callback }) => {
      if (
        raced || vm !== a || call !== "proxy_get_metric" ||
        callback !== "proxy_on_http_call_response"
      ) return;
      raced = true;
      b.createStream();
    };
    answer(host.calls[0]!, false, "3");
    expect(raced).toBe(true);
    expect(body(host.calls[1]!)).toMatchObject({ reason: "probe", probe: 3, inflight: 1 });
  });

  test.each([
    ["0"],
    ["-1"],
    ["+1"],
    ["01"],
    ["1.5"],
    ["1e3"],
    ["0x10"],
    [" 7"],
    ["7 "],
    [""],
    ["abc"],
    ["7,8"],
    ["9007199254740992"],
    ["18446744073709551617"],
    ["12345678901234567"],
  ])("an invalid probe header %j is ignored", (probe) => {
    const host = new ProxyWasmHost();
    const vm = host.createVm();
    vm.tick();
    answer(host.calls[0]!, false, probe);
    expect(host.calls).toHaveLength(1);
    expect(host.metric(FAILED)).toBe(0);
  });

  test("a probe or a drain on an answer other than 200 is ignored", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm();
    vm.tick();
    host.calls[0]!.respond(503, "", [["x-lastcall-draining", "1"], ["x-lastcall-probe", "5"]]);
    vm.tick();
    expect(host.calls.map(body)).toMatchObject([{ reason: "heartbeat" }, {
      reason: "heartbeat",
      draining: false,
    }]);
  });

  test("draining and a probe in one answer: drain_ack first, then the probe report; each VM acks once", () => {
    const host = new ProxyWasmHost();
    const [a, b] = [host.createVm(), host.createVm()];
    b.createStream();
    a.tick();
    b.tick();
    answer(host.calls[0]!, true, "7");
    expect(host.calls.slice(2).map((call) => [call.vm.index, body(call)])).toEqual([
      [0, { instance: "", epoch: 0, inflight: 1, draining: true, reason: "drain_ack" }],
      [0, { instance: "", epoch: 0, inflight: 1, draining: true, reason: "probe", probe: 7 }],
    ]);
    answer(host.calls[1]!, true, "8"); // b learns now: its own ack, then the probe
    expect(host.calls.slice(4).map((call) => [call.vm.index, body(call)])).toEqual([
      [1, { instance: "", epoch: 0, inflight: 1, draining: true, reason: "drain_ack" }],
      [1, { instance: "", epoch: 0, inflight: 1, draining: true, reason: "probe", probe: 8 }],
    ]);
    answer(host.calls[5]!, true, "9"); // b knows: the probe alone
    expect(host.calls.slice(6).map((call) => [call.vm.index, body(call).reason])).toEqual([[
      1,
      "probe",
    ]]);
  });
});
