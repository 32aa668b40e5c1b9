// Reports to the agent (docs/filter-protocol.md, "Reports" and "The agent's answer"): each VM's
// heartbeat, its own sticky draining flag learned from the answers to ITS reports, one drain_ack
// per VM, pushes of moves to and from zero while it knows, probes answered with the gauge.
import { describe, expect, test } from "vitest";
import {
  type FilterVm,
  type HttpCall,
  ProxyWasmHost,
  WasmResult,
} from "../support/proxy-wasm-host.ts";
import { prng } from "./prng.ts";
import { gaugeName } from "./truth.ts";

const GAUGE = gaugeName(0);
const TOTAL = "wasmcustom.lastcall_streams_total";
const SENT = "wasmcustom.lastcall_reports_sent";
const FAILED = "wasmcustom.lastcall_reports_failed";
const HEADERS: [string, string][] = [[":method", "POST"], [":path", "/v1/inflight"], [
  ":authority",
  "lastcall",
], ["content-type", "application/json"]];

interface Report {
  instance: string;
  epoch: number;
  inflight: number;
  draining: boolean;
  reason: string;
  probe?: number;
}
/** A report's body without its `vm` (checked here: absent, or the decimal id the agent gave; holders.test.ts). */
const body = (call: HttpCall) => {
  const { vm, ...report } = JSON.parse(call.body) as Report & { vm?: unknown };
  if (vm !== undefined) expect(vm).toMatch(/^[1-9]\d*$/);
  return report as Report;
};
const reasons = (calls: HttpCall[]) => calls.map((call) => body(call).reason);

/** The agent's answer to a report: 200, `x-lastcall-draining` and maybe `x-lastcall-probe`; a body for humans. */
function answer(call: HttpCall, draining: boolean, probe?: string): void {
  const headers: [string, string][] = [["x-lastcall-draining", draining ? "1" : "0"]];
  if (probe !== undefined) headers.push(["x-lastcall-probe", probe]);
  call.respond(200, JSON.stringify({ draining }), headers);
}

/** Ticks `vm` and answers its heartbeat: after this the VM knows of the drain (or not). */
function heartbeat(
  host: ProxyWasmHost,
  vm: FilterVm,
  draining: boolean,
  probe?: string,
): HttpCall[] {
  const from = host.calls.length;
  vm.tick();
  answer(host.calls[from]!, draining, probe);
  return host.calls.slice(from);
}

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

describe("draining", () => {
  test("each VM acks the drain once, when it first learns of it from an answer to its own report", () => {
    const host = new ProxyWasmHost();
    const vms = [host.createVm(), host.createVm(), host.createVm()];
    const ids = vms.map((vm) => vm.createStream());
    expect(heartbeat(host, vms[0]!, true).map(body)).toEqual([
      { instance: "", epoch: 0, inflight: 3, draining: false, reason: "heartbeat" },
      { instance: "", epoch: 0, inflight: 3, draining: true, reason: "drain_ack" },
    ]);
    expect(reasons(heartbeat(host, vms[0]!, true))).toEqual(["heartbeat"]); // known: no second ack
    vms[0]!.endStream(ids[0]!);
    const second = heartbeat(host, vms[1]!, true);
    expect(second.map((call) => call.vm)).toEqual([vms[1], vms[1]]);
    expect(second.map(body)).toMatchObject([
      { inflight: 2, draining: false, reason: "heartbeat" },
      { inflight: 2, draining: true, reason: "drain_ack" },
    ]);
    vms[2]!.tick(); // never answered: does not know, does not ack
    expect(body(host.calls.at(-1)!)).toMatchObject({ draining: false, reason: "heartbeat" });
    expect(host.calls.filter((call) => body(call).reason === "drain_ack").map((call) => call.vm))
      .toEqual([vms[0], vms[1]]);
    vms.forEach((vm, i) => {
      if (i > 0) vm.endStream(ids[i]!);
    });
  });

  test("the ack reads the gauge after the VM learned: another VM's move just before the read is in it", () => {
    const host = new ProxyWasmHost();
    const [a, b] = [host.createVm(), host.createVm()];
    const stream = b.createStream();
    a.tick();
    let raced = false;
    host.beforeHostCall = ({ vm, call, callback }) => {
      if (
        raced || vm !== a || call !== "proxy_get_metric" ||
        callback !== "proxy_on_http_call_response"
      ) return;
      raced = true;
      b.endStream(stream); // b does not know of the drain: its 1 → 0 pushes nothing
    };
    answer(host.calls[0]!, true);
    expect(raced).toBe(true);
    expect(
      host.calls.slice(1).map((call) => [call.vm.index, body(call).reason, body(call).inflight]),
    ).toEqual([[0, "drain_ack", 0]]);
  });

  test("a drain learned at zero is acked with inflight 0", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm();
    expect(body(heartbeat(host, vm, true)[1]!)).toEqual({
      instance: "",
      epoch: 0,
      inflight: 0,
      draining: true,
      reason: "drain_ack",
    });
  });

  test("only a VM that knows of the drain pushes busy and zero, each read right after its own move", () => {
    const host = new ProxyWasmHost();
    const [a, b] = [host.createVm(), host.createVm()];
    heartbeat(host, a, true);
    const from = host.calls.length;
    const pushes = () =>
      host.calls.slice(from).map((call) =>
        `${call.vm.index} ${body(call).reason} ${body(call).inflight}`
      );
    b.endStream(b.createStream()); // b does not know: 0 → 1 → 0 pushes nothing
    expect(pushes()).toEqual([]);
    const first = a.createStream(); // 0 → 1
    const second = b.createStream(); // 1 → 2, b does not know
    const third = a.createStream(); // 2 → 3: not a move from zero
    a.endStream(first); // 3 → 2
    a.endStream(third); // 2 → 1
    expect(pushes()).toEqual(["0 busy 1"]);
    b.endStream(second); // 1 → 0 by b, which does not know: the agent learns it from a pull or b's ack
    expect(pushes()).toEqual(["0 busy 1"]);
    heartbeat(host, b, true);
    expect(pushes()).toEqual(["0 busy 1", "1 heartbeat 0", "1 drain_ack 0"]);
    b.endStream(b.createStream());
    expect(pushes().slice(3)).toEqual(["1 busy 1", "1 zero 0"]);
  });

  test("only x-lastcall-draining: 1 on a 200 says draining; the body is not read", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm();
    const answers: [number, string, [string, string][]][] = [
      [503, '{"draining":true}', [["x-lastcall-draining", "1"]]],
      [401, "", [["x-lastcall-draining", "1"]]],
      [200, '{"draining":true}', []],
      [200, '{"draining":true}', [["x-lastcall-draining", "0"]]],
      [200, "", [["x-lastcall-draining", "true"]]],
      [200, "", [["x-lastcall-draining", "11"]]],
      [200, "", [["x-lastcall-draining", ""]]],
      [200, "", [["x-lastcall-draining", " 1"]]],
      [200, "", [["x-lastcall-draining", "1 "]]],
      [200, "", [["x-lastcall-draining", "01"]]],
    ];
    for (const [status, text, headers] of answers) {
      vm.tick();
      host.calls.at(-1)!.respond(status, text, headers);
    }
    expect(host.calls).toHaveLength(answers.length);
    vm.endStream(vm.createStream());
    vm.tick();
    expect(host.calls.slice(answers.length).map(body)).toMatchObject([{
      reason: "heartbeat",
      draining: false,
    }]);
    host.calls.at(-1)!.respond(200, "", [["x-lastcall-draining", "1"]]);
    expect(reasons(host.calls).at(-1)).toBe("drain_ack");
  });

  test("the flag is sticky: no later answer clears it, and the ack is never repeated", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm();
    heartbeat(host, vm, true);
    vm.tick();
    host.calls.at(-1)!.respond(200, "", [["x-lastcall-draining", "0"]]);
    vm.tick();
    host.calls.at(-1)!.respond(200, "", []);
    vm.tick();
    host.calls.at(-1)!.respond(503, "");
    vm.tick();
    host.calls.at(-1)!.fail();
    heartbeat(host, vm, true);
    vm.endStream(vm.createStream());
    vm.tick();
    expect(host.calls.slice(2).map((call) => `${body(call).reason} ${body(call).draining}`))
      .toEqual([
        ...Array(5).fill("heartbeat true"),
        "busy true",
        "zero true",
        "heartbeat true",
      ]);
  });

  test("while every VM knows, the pushes are exactly the count's moves to and from zero, alternating", () => {
    for (const seed of [11, 12, 13]) {
      const host = new ProxyWasmHost();
      const random = prng(seed);
      const vms = Array.from(
        { length: 4 },
        () => host.createVm({ configuration: '{"exclude_paths":["/healthz"]}' }),
      );
      for (const vm of vms) heartbeat(host, vm, true);
      const from = host.calls.length;
      const live: { vm: FilterVm; id: number; counted: boolean }[] = [];
      const moves: string[] = [];
      let count = 0;
      const moved = (delta: number) => {
        count += delta;
        if (delta > 0 && count === 1) moves.push("busy 1");
        if (delta < 0 && count === 0) moves.push("zero 0");
      };
      const end = ({ vm, id, counted }: typeof live[number]) => {
        vm.endStream(id);
        if (counted) moved(-1);
      };
      for (let step = 0; step < 4000; step++) {
        if (random() < 0.5 - live.length * 0.08) { // keep the count low so it crosses zero often
          const vm = vms[Math.floor(random() * 4)]!;
          const stream = { vm, id: vm.createStream(), counted: true };
          moved(1);
          if (random() < 0.2) {
            vm.requestHeaders(stream.id, { ":path": "/healthz" });
            stream.counted = false;
            moved(-1);
          }
          live.push(stream);
        } else if (live.length > 0) {
          end(live.splice(Math.floor(random() * live.length), 1)[0]!);
        }
      }
      for (const stream of live.splice(0)) end(stream);
      const pushes = host.calls.slice(from).map((call) =>
        `${body(call).reason} ${body(call).inflight}`
      );
      expect(moves.length).toBeGreaterThan(100);
      expect(pushes).toEqual(moves);
      expect(host.calls.slice(from).every((call) => body(call).draining)).toBe(true);
      expect(host.metric(GAUGE)).toBe(0);
    }
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
