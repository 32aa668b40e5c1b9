// Worker VMs racing on the shared counter and the draining flag. Envoy's workers hold no lock
// between two host calls, so any other worker may run there; the in-process host plays that by
// running other VMs inside `beforeHostCall` (see test/support/proxy-wasm-host.ts).
import fc from "fast-check";
import { describe, expect, test } from "vitest";
import { type FilterVm, type HostCallPoint, type HttpCall, ProxyWasmHost, WasmResult } from "../support/proxy-wasm-host.ts";

const GAUGE = "wasmcustom.lastcall_inflight";
const INFLIGHT = "lastcall.inflight";
const DRAINING = "lastcall.draining";

interface Report {
  instance: string; epoch: number; seq: number; inflight: number; draining: boolean;
  reason: "heartbeat" | "drain_ack" | "zero" | "busy" | "probe"; probe?: number;
}
const parsed = new WeakMap<HttpCall, Report>();
function body(call: HttpCall): Report {
  let report = parsed.get(call);
  if (!report) parsed.set(call, (report = JSON.parse(call.body) as Report));
  return report;
}

function answerDraining(call: HttpCall): void {
  call.respond(200, '{"draining":true}', [["x-lastcall-draining", "1"]]);
}

describe("two VMs learn of the drain at once", () => {
  // The race of the CI flake: both read the flag as not set, both write it. With the flag created
  // at configure, the second write is a stale CAS and retries into "already set".
  test.each([
    ["between the other's get and set of the flag", "proxy_set_shared_data"],
    ["before the other's get of the flag", "proxy_get_shared_data"],
  ])("exactly one drain_ack when one VM sets the flag %s", (_, at) => {
    const host = new ProxyWasmHost();
    const [a, b] = [host.createVm(), host.createVm()];
    const stream = b.createStream();
    a.tick();
    b.tick();
    const [aCall, bCall] = host.calls;
    let raced = false;
    host.beforeHostCall = ({ vm, call, key }) => {
      if (raced || vm !== a || call !== at || key !== DRAINING) return;
      raced = true;
      answerDraining(bCall!); // b runs to completion inside a's setDraining
    };
    answerDraining(aCall!);
    expect(raced).toBe(true);
    const reports = host.calls.map(body);
    expect(reports.filter((r) => r.reason === "drain_ack")).toEqual([
      { instance: "", epoch: 0, seq: 1, inflight: 1, draining: true, reason: "drain_ack" },
    ]);
    expect(host.calls.find((call) => body(call).reason === "drain_ack")!.vm).toBe(b);
    if (at === "proxy_set_shared_data") expect(host.casMismatches).toBe(1);
    b.endStream(stream);
    expect(body(host.calls.at(-1)!)).toMatchObject({ reason: "zero", inflight: 0, seq: 2 });
  });

  test("a transition racing the ack is reported by one of them", () => {
    // The ack reads the counter after its flag write; a transition reads the flag after its CAS.
    for (const at of ["proxy_get_shared_data", "proxy_set_shared_data", "proxy_increment_metric"] as const) {
      const host = new ProxyWasmHost();
      const [a, b] = [host.createVm(), host.createVm()];
      const stream = b.createStream();
      a.tick();
      let raced = 0;
      host.beforeHostCall = ({ vm, call, callback }) => {
        if (raced > 0 || vm !== b || call !== at || callback !== "proxy_on_delete") return;
        raced++;
        answerDraining(host.calls[0]!); // a learns of the drain in the middle of b's 1 → 0
      };
      b.endStream(stream);
      expect(raced).toBe(1);
      const reports = host.calls.slice(1).map(body);
      const newest = reports.reduce((x, y) => (y.seq > x.seq ? y : x));
      expect(newest).toMatchObject({ seq: 2, inflight: 0, draining: true });
    }
  });

  // The hot path reads no flag: a +1/−1 takes the copy of the flag in the counter's record (byte
  // 16), which the acking VM sets with a CAS after the flag. Another worker's 1 → 0 at every host
  // call of that sequence: before the copy it is in the ack's count, after it it is reported.
  test.each([
    ["before the flag's CAS", "proxy_get_shared_data", DRAINING, 0],
    ["between the flag and its copy", "proxy_get_shared_data", INFLIGHT, 0],
    ["between the copy's get and set (the copy's CAS retries)", "proxy_set_shared_data", INFLIGHT, 1],
  ] as const)("a 1 → 0 %s is in the ack's count, not reported by itself", (_, at, key, mismatches) => {
    const host = new ProxyWasmHost();
    const [a, b] = [host.createVm(), host.createVm()];
    const stream = b.createStream();
    a.tick();
    let raced = false;
    host.beforeHostCall = ({ vm, call, key: k, callback }) => {
      if (raced || vm !== a || callback !== "proxy_on_http_call_response" || call !== at || k !== key) return;
      raced = true;
      b.endStream(stream); // not draining yet as b's CAS sees it: no zero report
    };
    answerDraining(host.calls[0]!);
    expect(raced).toBe(true);
    expect(host.casMismatches).toBe(mismatches);
    expect(host.calls.slice(1).map(body)).toEqual([
      { instance: "", epoch: 0, seq: 2, inflight: 0, draining: true, reason: "drain_ack" },
    ]);
    expect(host.sharedData(INFLIGHT)!.value[16]).toBe(1);
  });

  test("a 1 → 0 right after the copy is reported by its own worker", () => {
    const host = new ProxyWasmHost();
    const [a, b] = [host.createVm(), host.createVm()];
    const stream = b.createStream();
    a.tick();
    let raced = false;
    host.afterHostCall = ({ vm, call, key }, result) => {
      if (raced || vm !== a || call !== "proxy_set_shared_data" || key !== INFLIGHT || result !== WasmResult.Ok) return;
      raced = true;
      b.endStream(stream); // runs before a's ack is sent: sees the copy, reports its zero
    };
    answerDraining(host.calls[0]!);
    expect(raced).toBe(true);
    expect(host.calls.slice(1).map(body)).toEqual([
      { instance: "", epoch: 0, seq: 2, inflight: 0, draining: true, reason: "zero" },
      { instance: "", epoch: 0, seq: 1, inflight: 1, draining: true, reason: "drain_ack" },
    ]);
  });

  test("outside a drain a request costs one CAS per +1 and per −1 and the metric updates: no flag read", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm({ configuration: '{"heartbeat_ms":0}' });
    const calls: string[] = [];
    host.afterHostCall = ({ call, key }) => { calls.push(`${call} ${key}`); };
    const id = vm.createStream();
    vm.requestHeaders(id, { ":path": "/api" });
    vm.endStream(id);
    expect(calls).toEqual([
      `proxy_increment_metric ${GAUGE}`, `proxy_get_shared_data ${INFLIGHT}`, `proxy_set_shared_data ${INFLIGHT}`,
      `proxy_get_shared_data ${INFLIGHT}`, `proxy_set_shared_data ${INFLIGHT}`, `proxy_increment_metric ${GAUGE}`,
      "proxy_increment_metric wasmcustom.lastcall_streams_total",
    ]);
  });
});

// ---- property: random interleavings of VMs' streams, reports and the agent's answers ----

type Action =
  | { t: "create"; vm: number; fail?: "proxy_get_shared_data" | "proxy_set_shared_data" }
  | { t: "headers"; pick: number; excluded: boolean }
  | { t: "end"; pick: number }
  | { t: "tick"; vm: number }
  | { t: "answer"; pick: number; status: number; draining?: string; probe?: string }
  | { t: "fail"; pick: number };

// One create in ten fails in the host (at the counter's get or set): it must not be counted.
const FAILS = [...Array<undefined>(18).fill(undefined), "proxy_get_shared_data" as const, "proxy_set_shared_data" as const];
const INVALID_PROBES = ["0", "-1", "01", "1.5", "9007199254740992", "", "x", " 5"];
const action: fc.Arbitrary<Action> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ t: fc.constant("create" as const), vm: fc.nat(3), fail: fc.constantFrom(...FAILS) }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant("headers" as const), pick: fc.nat(), excluded: fc.boolean() }) },
  { weight: 5, arbitrary: fc.record({ t: fc.constant("end" as const), pick: fc.nat() }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant("tick" as const), vm: fc.nat(3) }) },
  {
    weight: 3,
    arbitrary: fc.record({
      t: fc.constant("answer" as const),
      pick: fc.nat(),
      status: fc.constantFrom(200, 200, 200, 503),
      draining: fc.constantFrom(undefined, "0", "1", "1", "true"),
      probe: fc.constantFrom(undefined, undefined, "valid", "valid", ...INVALID_PROBES),
    }),
  },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("fail" as const), pick: fc.nat() }) },
);

// Plain checks, the message built only on failure: they run at every host call.
function check(condition: boolean, message: () => string): void {
  if (!condition) throw new Error(message());
}
function checkEqual<T>(actual: T, expected: T, message: () => string): void {
  if (actual !== expected) throw new Error(`${message()}: ${String(actual)}, expected ${String(expected)}`);
}

interface Stream { vm: FilterVm; id: number; counted: boolean; headers: boolean }
interface Read { call: HostCallPoint["call"]; key: string; result: number; count?: number; version?: number; flag?: boolean; copy?: boolean }

function scenario(vmCount: number, actions: Action[], nestings: number[]): void {
  const host = new ProxyWasmHost();
  const vms = Array.from({ length: vmCount }, () => host.createVm({ configuration: '{"exclude_paths":["/healthz"]}' }));
  const streams: Stream[] = [];
  const traces = new Map<FilterVm, Read[]>(vms.map((vm) => [vm, []]));
  const faults = new Map<FilterVm, string>();
  const probesAsked: { vm: FilterVm; id: number }[] = [];
  let drainAnswered = false;
  let acks = 0;
  let newestDraining: Report | undefined;
  const bySeq = new Map<number, number>();
  let flagSetAtVersion: number | undefined;
  let nextProbe = 1;
  let next = 0;
  let nesting = 0;
  let depth = 0;
  const live = () => host.vms.reduce((sum, vm) => sum + vm.liveStreams, 0);
  const counted = () => streams.filter((s) => s.counted).length;

  const run = (a: Action): void => {
    const free = vms.filter((vm) => !vm.busy);
    if (free.length === 0) return;
    const vmOf = (i: number) => free[i % free.length]!;
    switch (a.t) {
      case "create": {
        const vm = vmOf(a.vm);
        if (a.fail) faults.set(vm, a.fail);
        traces.set(vm, []);
        const stream: Stream = { vm, id: 0, counted: false, headers: false };
        stream.id = vm.createStream();
        stream.counted = !a.fail;
        faults.delete(vm);
        streams.push(stream);
        return;
      }
      case "headers": case "end": {
        const candidates = streams.filter((s) => !s.vm.busy && (a.t === "end" || !s.headers));
        if (candidates.length === 0) return;
        const stream = candidates[a.pick % candidates.length]!;
        traces.set(stream.vm, []);
        if (a.t === "headers") {
          stream.headers = true;
          stream.vm.requestHeaders(stream.id, { ":path": a.excluded ? "/healthz?x=1" : "/api" });
          if (a.excluded) stream.counted = false;
        } else {
          streams.splice(streams.indexOf(stream), 1);
          stream.vm.endStream(stream.id);
        }
        return;
      }
      case "tick": {
        const vm = vmOf(a.vm);
        traces.set(vm, []);
        vm.tick();
        return;
      }
      case "answer": case "fail": {
        const pending = host.pendingCalls().filter((call) => !call.vm.busy);
        if (pending.length === 0) return;
        const call = pending[a.pick % pending.length]!;
        traces.set(call.vm, []);
        if (a.t === "fail") { call.fail(); return; }
        const headers: [string, string][] = [];
        if (a.draining !== undefined) headers.push(["x-lastcall-draining", a.draining]);
        let probe = a.probe;
        if (probe === "valid") probe = String(nextProbe++ % 3 === 0 ? Number.MAX_SAFE_INTEGER - nextProbe : nextProbe);
        if (probe !== undefined) headers.push(["x-lastcall-probe", probe]);
        if (a.status === 200 && a.draining === "1") drainAnswered = true;
        if (a.status === 200 && a.probe === "valid") probesAsked.push({ vm: call.vm, id: Number(probe) });
        call.respond(a.status, JSON.stringify({ draining: a.draining === "1" }), headers);
        return;
      }
    }
  };

  host.beforeHostCall = (point) => {
    const { vm, call, key, callback } = point;
    if (faults.get(vm) === call && key === INFLIGHT && callback === "proxy_on_context_create") {
      faults.delete(vm);
      return WasmResult.InternalFailure;
    }
    // Another worker runs here, between two host calls of this VM (up to three deep).
    if (depth >= 3 || next >= actions.length || nestings[nesting++ % nestings.length]! > 1) return;
    depth++;
    try {
      run(actions[next++]!);
    } finally {
      depth--;
    }
  };

  // Checked at every host call (plain checks: tens of thousands per run).
  host.afterHostCall = (point, result) => {
    const { vm, call, key } = point;
    // At every instant: 0 ≤ counter ≤ gauge ≤ live contexts.
    const state = host.inflight()!;
    const gauge = host.metric(GAUGE)!;
    check(state.count >= 0 && state.count <= gauge && gauge <= live(), () => `counter ${state.count}, gauge ${gauge}, live contexts ${live()}`);
    const trace = traces.get(vm)!;
    if (call === "proxy_get_shared_data" || call === "proxy_set_shared_data") {
      const read: Read = { call, key, result };
      if (key === INFLIGHT) Object.assign(read, state, { copy: host.sharedData(INFLIGHT)?.value[16] === 1 });
      if (key === DRAINING) read.flag = host.sharedData(DRAINING)?.value[0] === 1;
      trace.push(read);
      if (call === "proxy_set_shared_data" && key === DRAINING && result === WasmResult.Ok) {
        checkEqual(flagSetAtVersion, undefined, () => "the draining flag was set twice");
        flagSetAtVersion = state.version;
      }
      // The copy of the flag in the counter's record is set only after the flag itself.
      if (read.copy) check(flagSetAtVersion !== undefined, () => "the counter's record says draining before the flag was set");
      return;
    }
    if (call !== "proxy_http_call" || result !== WasmResult.Ok) return;
    // A report: its numbers are the counter as this VM read (or wrote) it, its flag as it read it.
    const report = body(host.calls.at(-1)!);
    const what = () => `${JSON.stringify(report)} after ${JSON.stringify(trace)}`;
    const since = trace.slice(trace.findLastIndex((r) => r.call === "proxy_http_call") + 1);
    trace.push({ call, key, result });
    const last = (pred: (r: Read) => boolean) => since.findLastIndex(pred);
    if (report.reason === "drain_ack") acks++;
    if (report.draining && (!newestDraining || report.seq > newestDraining.seq)) newestDraining = report;
    checkEqual(bySeq.get(report.seq) ?? report.inflight, report.inflight, () => `two reports with one seq disagree: ${what()}`);
    bySeq.set(report.seq, report.inflight);
    checkEqual("probe" in report, report.reason === "probe", what);
    let counter: number; // index in `since` of the counter state the report describes
    if (report.reason === "busy" || report.reason === "zero") {
      // A transition takes the flag from the record its own CAS wrote (the copy), no other read.
      counter = last((r) => r.call === "proxy_set_shared_data" && r.key === INFLIGHT && r.result === WasmResult.Ok);
      check(counter >= 0 && since[counter]!.copy === true, () => `a transition reports only from a record that says draining: ${what()}`);
      check(report.draining && report.inflight === (report.reason === "busy" ? 1 : 0), what);
    } else {
      counter = last((r) => r.call === "proxy_get_shared_data" && r.key === INFLIGHT && r.result === WasmResult.Ok);
      if (report.reason === "drain_ack") {
        // The ack's count is the record in which this VM set the copy, after setting the flag.
        const set = last((r) => r.call === "proxy_set_shared_data" && r.key === DRAINING && r.result === WasmResult.Ok);
        const copy = last((r) => r.call === "proxy_set_shared_data" && r.key === INFLIGHT && r.result === WasmResult.Ok);
        check(set >= 0 && counter > set && copy > counter && since[copy]!.copy === true && report.draining,
          () => `the ack reports the record of its copy, set after the flag: ${what()}`);
      } else {
        const flag = last((r) => r.call === "proxy_get_shared_data" && r.key === DRAINING);
        check(flag >= 0 && counter > flag, () => `flag, THEN counter: ${what()}`);
        checkEqual(report.draining, since[flag]!.flag, what);
      }
      // Composed while draining: never a count from before the flag was set.
      if (report.draining) check(report.seq >= flagSetAtVersion!, () => `a count older than the drain: ${what()}`);
    }
    check(report.seq === since[counter]!.version && report.inflight === since[counter]!.count, () => `not the count it read: ${what()}`);
  };

  const quiescent = () => {
    const state = host.inflight()!;
    checkEqual(state.count, counted(), () => "the counter is the number of counted streams");
    checkEqual(host.metric(GAUGE), state.count, () => "the gauge equals the counter when quiescent");
    checkEqual(acks, drainAnswered ? 1 : 0, () => "drain_ack reports");
    checkEqual(host.sharedData(DRAINING)?.value[0] ?? 0, drainAnswered ? 1 : 0, () => "the draining flag");
    checkEqual(host.sharedData(INFLIGHT)?.value[16] ?? 0, drainAnswered ? 1 : 0, () => "the flag's copy in the counter's record");
    // The newest report composed while draining says zero only if nothing is in flight.
    if (newestDraining?.inflight === 0) checkEqual(state.count, 0, () => `a false zero: ${JSON.stringify(newestDraining)}`);
  };

  while (next < actions.length) {
    run(actions[next++]!);
    expect(depth).toBe(0);
    quiescent();
  }
  for (const stream of streams.splice(0)) stream.vm.endStream(stream.id);
  quiescent();
  expect(host.inflight()!.count).toBe(0);
  // Every probe answered with one probe report from the VM asked; invalid ids got none.
  const probes = host.calls.filter((call) => body(call).reason === "probe");
  const byId = (x: { id: number }, y: { id: number }) => x.id - y.id;
  expect(probes.map((call) => ({ vm: call.vm, id: body(call).probe! })).sort(byId)).toEqual([...probesAsked].sort(byId));
  expect(vms.every((vm) => vm.failed === undefined)).toBe(true);
}

test("in random interleavings: counter ≥ 0, gauge ≥ counter, one drain_ack, every probe answered with the count it read", () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 2, max: 4 }),
      fc.array(action, { minLength: 1, maxLength: 200, size: "max" }),
      fc.array(fc.nat(9), { minLength: 1, maxLength: 40 }),
      (vmCount, actions, nestings) => scenario(vmCount, actions, nestings),
    ),
    { numRuns: 300 },
  );
});
