// Worker VMs racing on the one process-wide gauge, in random interleavings of their streams,
// reports and the agent's answers (push-races.test.ts has the named races). Envoy's workers hold
// no lock between two host calls, so any other worker may run there; the in-process host plays
// that by running other VMs inside `beforeHostCall` (see test/support/proxy-wasm-host.ts).
import fc from "fast-check";
import { expect, test } from "vitest";
import {
  type FilterVm,
  type HostCallPoint,
  ProxyWasmHost,
  WasmResult,
} from "../support/proxy-wasm-host.ts";
import { type Action, action, type Fault } from "./race-actions.ts";
import { body, type Report } from "./reports-host.ts";
import { check, gaugeName, Truth } from "./truth.ts";

const BODY =
  /^\{"instance":"","epoch":\d+,"inflight":\d+,"draining":(true|false),"reason":"(heartbeat|drain_ack|zero|busy|probe)"(,"probe":[1-9]\d*)?(,"vm":"[1-9]\d*")?\}$/;

interface Stream {
  vm: FilterVm;
  id: number;
  counted: boolean;
  headers: boolean;
}
interface Read {
  ok: boolean;
  value: number;
  truth: number;
  afterMove: boolean;
}
/** One callback the scenario drives, and what the filter did in it. */
interface Frame {
  kind: Action["t"];
  delta: -1 | 0 | 1;
  knew: boolean;
  fault: Fault;
  faultHit: boolean;
  learns: boolean;
  probe: number | undefined;
  reads: Read[];
  /** Index in `reads` of the read the last report carried. */
  used: number;
  reports: Report[];
}

/** What the runs exercised, so that the property cannot pass on runs that never reach a drain. */
const seen = { nested: 0, faults: 0, acks: 0, zero: 0, busy: 0, probe: 0, unaware: 0 };

function scenario(
  vmCount: number,
  excluding: boolean[],
  epoch: number,
  actions: Action[],
  nestings: number[],
): void {
  const host = new ProxyWasmHost();
  const gauge = gaugeName(epoch);
  const truth = new Truth(host, gauge);
  const vms = Array.from(
    { length: vmCount },
    (_, i) =>
      host.createVm({
        configuration: JSON.stringify({
          epoch,
          ...(excluding[i] ? { exclude_paths: ["/healthz"] } : {}),
        }),
      }),
  );
  const streams: Stream[] = [];
  const knows = new Set<FilterVm>();
  const acks = new Map<FilterVm, number>();
  const frames = new Map<FilterVm, Frame>();
  let failures = 0;
  let sent = 0;
  let finished = 0;
  let nextProbe = 1;
  let next = 0;
  let nesting = 0;
  let depth = 0;

  // Runs one callback of `vm`, then checks what the filter did in it against the contract.
  const drive = <T>(
    vm: FilterVm,
    kind: Action["t"],
    delta: -1 | 0 | 1,
    options: Partial<Frame>,
    callback: () => T,
  ): T => {
    const frame: Frame = {
      kind,
      delta,
      knew: knows.has(vm),
      fault: undefined,
      faultHit: false,
      learns: false,
      probe: undefined,
      reads: [],
      used: -1,
      reports: [],
      ...options,
    };
    frames.set(vm, frame);
    let result: T;
    try {
      result = truth.run(vm, delta, callback);
    } finally {
      frames.delete(vm);
    }
    const reasons = frame.reports.map((r) => r.reason);
    const what = () =>
      `VM ${vm.index} ${kind} (delta ${delta}, knew ${frame.knew}, fault ${frame.fault} hit ${frame.faultHit}): reads ${
        JSON.stringify(frame.reads)
      }, reports ${JSON.stringify(frame.reports)}`;
    if (frame.faultHit) {
      failures++;
      seen.faults++;
    }
    for (const reason of reasons) {
      if (reason === "drain_ack" || reason === "zero" || reason === "busy" || reason === "probe") {
        seen[reason === "drain_ack" ? "acks" : reason]++;
      }
    }
    let expected: string[];
    if (kind === "create" || kind === "end" || kind === "headers") {
      if (!frame.knew || delta === 0) {
        check(frame.reads.length === 0, () => `outside a drain a stream reads nothing: ${what()}`);
        expected = [];
      } else {
        // While it knows, a VM reads the gauge once, after its move, and pushes a move to or from zero.
        const read = frame.reads[0];
        check(
          frame.reads.length === 1 && read!.afterMove,
          () => `one read, after the move: ${what()}`,
        );
        const push = read!.ok && read!.value === (delta > 0 ? 1 : 0) &&
          !(frame.faultHit && frame.fault === "proxy_http_call");
        expected = push ? [delta > 0 ? "busy" : "zero"] : [];
      }
    } else {
      if (kind === "tick") expected = ["heartbeat"];
      else {expected = [
          ...(frame.learns ? ["drain_ack"] : []),
          ...(frame.probe !== undefined ? ["probe"] : []),
        ];}
      if (frame.faultHit) expected.shift(); // the first read or report call of the callback failed: that report is not sent
    }
    check(
      reasons.join() === expected.join(),
      () => `reports ${reasons}, expected ${expected}: ${what()}`,
    );
    return result!;
  };

  const run = (a: Action): void => {
    const free = vms.filter((vm) => !vm.busy);
    if (free.length === 0) return;
    const vmOf = (i: number) => free[i % free.length]!;
    switch (a.t) {
      case "create": {
        const vm = vmOf(a.vm);
        const stream: Stream = { vm, id: 0, counted: true, headers: false };
        streams.push(stream);
        stream.id = drive(vm, "create", 1, { fault: a.fault }, () => vm.createStream());
        return;
      }
      case "headers":
      case "end": {
        const candidates = streams.filter((s) =>
          s.id !== 0 && !s.vm.busy && (a.t === "end" || !s.headers)
        );
        if (candidates.length === 0) return;
        const stream = candidates[a.pick % candidates.length]!;
        const { vm } = stream;
        if (a.t === "headers") {
          stream.headers = true;
          const excluded = a.excluded && excluding[vm.index]!;
          drive(
            vm,
            "headers",
            excluded ? -1 : 0,
            {},
            () => vm.requestHeaders(stream.id, { ":path": a.excluded ? "/healthz?x=1" : "/api" }),
          );
          if (excluded) stream.counted = false;
        } else {
          streams.splice(streams.indexOf(stream), 1);
          if (stream.counted) finished++;
          drive(
            vm,
            "end",
            stream.counted ? -1 : 0,
            { fault: a.fault },
            () => vm.endStream(stream.id),
          );
        }
        return;
      }
      case "tick": {
        const vm = vmOf(a.vm);
        drive(vm, "tick", 0, { fault: a.fault }, () => vm.tick());
        return;
      }
      case "answer":
      case "fail": {
        const pending = host.pendingCalls().filter((call) => !call.vm.busy);
        if (pending.length === 0) return;
        const call = pending[a.pick % pending.length]!;
        if (a.t === "fail") {
          failures++;
          drive(call.vm, "fail", 0, {}, () => call.fail());
          return;
        }
        const headers: [string, string][] = [];
        if (a.draining !== undefined) headers.push(["x-lastcall-draining", a.draining]);
        let probe = a.probe;
        if (probe === "valid") {
          probe = String(nextProbe++ % 3 === 0 ? Number.MAX_SAFE_INTEGER - nextProbe : nextProbe);
        }
        if (probe !== undefined) headers.push(["x-lastcall-probe", probe]);
        const ok = a.status === 200;
        if (!ok) failures++;
        // A VM acks the drain until one ack went out (a failed one goes with the next such answer).
        const tellsDrain = ok && a.draining === "1";
        const learns = tellsDrain && !(acks.get(call.vm)! > 0);
        if (tellsDrain) knows.add(call.vm);
        drive(call.vm, "answer", 0, {
          fault: a.fault,
          learns,
          probe: ok && a.probe === "valid" ? Number(probe) : undefined,
        }, () => call.respond(a.status, JSON.stringify({ draining: a.draining === "1" }), headers));
        return;
      }
    }
  };

  host.beforeHostCall = (point) => {
    const frame = frames.get(point.vm);
    if (frame && !frame.faultHit && frame.fault === point.call) {
      frame.faultHit = true;
      return WasmResult.InternalFailure;
    }
    // Another worker runs here, between two host calls of this VM (up to three deep).
    if (depth >= 3 || next >= actions.length || nestings[nesting++ % nestings.length]! > 1) return;
    depth++;
    seen.nested++;
    try {
      run(actions[next++]!);
    } finally {
      depth--;
    }
  };

  // Checked at every host call (plain checks: tens of thousands per run).
  host.afterHostCall = (point: HostCallPoint, result: number) => {
    truth.observe(point); // the gauge is the true count, never below 0
    const frame = frames.get(point.vm);
    if (!frame) return;
    if (point.call === "proxy_get_metric") {
      check(point.key === gauge, () => `VM ${point.vm.index} read ${point.key}`);
      frame.reads.push({
        ok: result === WasmResult.Ok,
        value: truth.gauge(),
        truth: truth.now(),
        afterMove: truth.op(point.vm)!.moved,
      });
      return;
    }
    if (point.call !== "proxy_http_call" || result !== WasmResult.Ok) return;
    sent++;
    const call = host.calls.at(-1)!;
    const report = body(call);
    frame.reports.push(report);
    const what = () =>
      `VM ${point.vm.index} sent ${call.body} in ${point.callback} after reads ${
        JSON.stringify(frame.reads)
      }`;
    check(BODY.test(call.body) && report.epoch === epoch, () => `report shape: ${what()}`);
    // Every report carries the count its own read found, and that was the true count then.
    const read = frame.reads.at(-1);
    check(
      read !== undefined && read.ok && frame.reads.length - 1 > frame.used &&
        read.value === report.inflight && read.truth === report.inflight,
      () => `a report of the gauge it read just before: ${what()}`,
    );
    frame.used = frame.reads.length - 1;
    check(
      report.draining === knows.has(point.vm),
      () => `draining is what this VM knows: ${what()}`,
    );
    if (report.reason === "zero" || report.reason === "busy") {
      check(
        frame.knew && read!.afterMove && report.inflight === (report.reason === "zero" ? 0 : 1) &&
          frame.delta === (report.reason === "zero" ? -1 : 1),
        () => `a push: by a VM that knew, read after its own move: ${what()}`,
      );
    }
    if (report.reason === "drain_ack") {
      acks.set(point.vm, (acks.get(point.vm) ?? 0) + 1);
      check(
        frame.learns && acks.get(point.vm) === 1,
        () => `one drain_ack per VM, until one goes out: ${what()}`,
      );
    }
    check(
      (report.reason === "probe") === ("probe" in report) &&
        report.probe === (report.reason === "probe" ? frame.probe : undefined),
      () => `a probe report answers the probe asked: ${what()}`,
    );
  };

  const quiescent = () => {
    expect(depth).toBe(0);
    check(
      truth.gauge() === streams.filter((s) => s.counted).length,
      () => `gauge ${truth.gauge()} at rest`,
    );
  };
  while (next < actions.length) {
    run(actions[next++]!);
    quiescent();
  }
  host.beforeHostCall = undefined;
  seen.unaware += vms.filter((vm) => !knows.has(vm)).length;
  for (const stream of [...streams]) {
    run({ t: "end", pick: streams.indexOf(stream), fault: undefined });
  }
  for (const vm of vms) run({ t: "tick", vm: vm.index, fault: undefined });
  quiescent();
  expect(truth.gauge()).toBe(0);
  expect(host.metric("wasmcustom.lastcall_streams_total")).toBe(finished);
  expect(host.metric("wasmcustom.lastcall_reports_sent")).toBe(sent);
  expect(host.metric("wasmcustom.lastcall_reports_failed")).toBe(failures);
  expect(vms.every((vm) => vm.failed === undefined)).toBe(true);
}

test("in random interleavings: the gauge is the true count at every host call, every report carries the count it read, pushes and acks as the contract says", () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 2, max: 4 }),
      fc.array(fc.boolean(), { minLength: 4, maxLength: 4 }),
      fc.nat(3),
      fc.array(action, { minLength: 1, maxLength: 200, size: "max" }),
      fc.array(fc.nat(9), { minLength: 1, maxLength: 40 }),
      (vmCount, excluding, epoch, actions, nestings) =>
        scenario(vmCount, excluding, epoch, actions, nestings),
    ),
    { numRuns: 300 },
  );
  for (const [what, count] of Object.entries(seen)) expect(count, what).toBeGreaterThan(30);
});
