// A VM's drain (docs/filter-protocol.md, "The agent's answer"): its own sticky draining flag
// learned from the answers to ITS reports, one drain_ack per VM, pushes of moves to and from zero
// once an answer that says so is not quiet (sticky).
import { describe, expect, test } from "vitest";
import { type FilterVm, ProxyWasmHost } from "../support/proxy-wasm-host.ts";
import { prng } from "./prng.ts";
import { answer, body, GAUGE, heartbeat, reasons } from "./reports-host.ts";

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

  test("a quiet drain (its floor holds): the VM names holders but neither acks nor pushes until an answer without x-lastcall-quiet; then it pushes for good", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm();
    const quiet: [string, string][] = [["x-lastcall-draining", "1"], ["x-lastcall-quiet", "1"]];
    const held = vm.createStream();
    vm.tick();
    host.calls.at(-1)!.respond(200, "", [...quiet, ["x-lastcall-holders", "4"]]);
    expect(host.calls.slice(1).map(body)).toMatchObject([
      { inflight: 1, draining: true, quiet: true, reason: "holders" },
    ]);
    vm.endStream(held); // 1 → 0 and 0 → 1 → 0 while quiet: nothing pushed
    vm.endStream(vm.createStream());
    vm.tick();
    host.calls.at(-1)!.respond(200, "", [["x-lastcall-draining", "1"], ["x-lastcall-quiet", "0"]]);
    expect(host.calls.slice(2).map(body)).toEqual([
      { instance: "", epoch: 0, inflight: 0, draining: true, quiet: true, reason: "heartbeat" },
      { instance: "", epoch: 0, inflight: 0, draining: true, reason: "drain_ack" },
    ]);
    vm.endStream(vm.createStream());
    vm.tick();
    host.calls.at(-1)!.respond(200, "", quiet); // a late quiet answer: pushes go on, no second ack
    vm.endStream(vm.createStream());
    expect(host.calls.slice(4).map((call) => `${body(call).reason} ${body(call).quiet}`)).toEqual([
      "busy undefined",
      "zero undefined",
      "heartbeat undefined",
      "busy undefined",
      "zero undefined",
    ]);
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
