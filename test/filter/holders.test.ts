// The holders of a drain in the in-process host: VM ids, the live table, the header parser and the
// report. `holder_paths`: holder-paths.test.ts.
import fc from "fast-check";
import { describe, expect, test } from "vitest";
import { ProxyWasmHost } from "../support/proxy-wasm-host.ts";
import { answerTick, ask, drain, EXCLUDING, ids, parse, SLOTS } from "./holders-host.ts";

describe("the VM id", () => {
  test("a VM reports without one until an answer gives it one (x-lastcall-vm); the first it takes stays", () => {
    const host = new ProxyWasmHost();
    const [a, b] = [host.createVm(), host.createVm()];
    a.tick();
    b.tick();
    expect(host.calls.map((c) => parse(c).vm)).toEqual([undefined, undefined]);
    host.calls[0]!.respond(200, "", [["x-lastcall-vm", "7"]]);
    host.calls[1]!.respond(200, "", [["x-lastcall-vm", "9007199254740991"]]); // 2^53 - 1
    answerTick(host, a, [["x-lastcall-vm", "8"]]); // a second id is not taken
    answerTick(host, b, [["x-lastcall-draining", "1"]]); // the ack already carries it
    expect(host.calls.slice(2).map((c) => [c.vm.index, parse(c).reason, parse(c).vm])).toEqual([
      [0, "heartbeat", "7"],
      [1, "heartbeat", "9007199254740991"],
      [1, "drain_ack", "9007199254740991"],
    ]);
    expect(host.calls[4]!.body).toMatch(/,"reason":"drain_ack","vm":"9007199254740991"\}$/);
  });

  test("an id that is not 1 to 2^53 - 1 in plain decimal is not taken (property)", () => {
    fc.assert(fc.property(fc.string({ maxLength: 20 }), (value) => {
      const host = new ProxyWasmHost();
      const vm = host.createVm();
      const reports = answerTick(host, vm, [["x-lastcall-vm", value]]);
      expect(reports).toEqual([]);
      answerTick(host, vm, []); // the next heartbeat
      const valid = /^[1-9]\d{0,15}$/.test(value) && Number(value) <= Number.MAX_SAFE_INTEGER;
      expect(parse(host.calls.at(-1)!).vm).toBe(valid ? value : undefined);
    }));
  });
});

describe("the holders report", () => {
  test("asked during a drain, a VM names its n oldest live streams, oldest first, as JSON; the effective context is the root's again", () => {
    const host = new ProxyWasmHost({ clock: () => 42n, keepRequestHeaders: true });
    const vm = host.createVm();
    const start = 1_795_000_000_000_000_000n;
    vm.createStream({ id: 9, startNs: start + 9n });
    vm.createStream({
      id: 7,
      startNs: start + 7n,
      address: "[::1]:8443",
      protocol: "HTTP/2",
      route: 'r"1',
    });
    vm.createStream({ id: 8, http: false, address: "10.0.0.1:9000" }); // a TCP connection: no request properties
    vm.requestHeaders(9, { ":method": "POST", ":path": '/b"\\\u0001\u007f\u00e9?secret=1' });
    vm.requestHeaders(7, { ":method": "GET", ":path": "/a" });
    drain(host, vm);
    const asked = ask(host, vm)!;
    expect(asked.call.body).toBe(
      '{"instance":"","epoch":0,"inflight":3,"draining":true,"reason":"holders","vm":"42","vm_inflight":3,"holders":[' +
        '{"id":7,"start_ns":1795000000000000007,"method":"GET","path":"/a","address":"[::1]:8443","protocol":"HTTP/2","cluster":"app","route":"r\\"1"},' +
        '{"id":8,"address":"10.0.0.1:9000","cluster":"app"},' +
        '{"id":9,"start_ns":1795000000000000009,"method":"POST","path":"/b\\"\\\\\\u0001\\u007f\\u00e9","address":"127.0.0.1:10000","protocol":"HTTP/1.1","cluster":"app"}]}',
    );
    expect(asked.call.effectiveContext).toBe(vm.rootContextId);
    expect(ids(ask(host, vm, "2")?.report)).toEqual([7, 8]);
    expect(ids(ask(host, vm, "1")?.report)).toEqual([7]);
  });

  test("in Envoy 1.40 (the default host) a live stream's method and path are not readable after its headers: id, start_ns, address, protocol, cluster", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm();
    const id = vm.createStream();
    vm.requestHeaders(id, { ":method": "GET", ":path": "/x" });
    drain(host, vm);
    expect(Object.keys(ask(host, vm)!.report.holders![0]!)).toEqual([
      "id",
      "start_ns",
      "address",
      "protocol",
      "cluster",
    ]);
  });

  test("outside a drain an ask is ignored; on one answer: drain_ack, then the probe, then the holders", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm();
    vm.createStream();
    expect(answerTick(host, vm, [["x-lastcall-draining", "0"], ["x-lastcall-holders", "32"]]))
      .toEqual([]);
    expect(answerTick(host, vm, [["x-lastcall-holders", "32"]])).toEqual([]);
    const calls = answerTick(host, vm, [["x-lastcall-draining", "1"], ["x-lastcall-probe", "3"], [
      "x-lastcall-holders",
      "32",
    ]]);
    expect(calls.map((c) => parse(c).reason)).toEqual(["drain_ack", "probe", "holders"]);
    expect(
      answerTick(host, vm, [["x-lastcall-draining", "0"], ["x-lastcall-holders", "32"]]).map((c) =>
        parse(c).reason
      ),
    ).toEqual(["holders"]); // draining is sticky
  });

  test("a stream leaves the table when it leaves the count: an excluded path at its headers, any other at its deletion", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm({ configuration: EXCLUDING });
    const [a, b, c] = [vm.createStream(), vm.createStream(), vm.createStream()];
    vm.requestHeaders(b, { ":path": "/healthz?probe=1" });
    drain(host, vm);
    expect(ask(host, vm)!.report).toMatchObject({
      inflight: 2,
      vm_inflight: 2,
      holders: [{ id: a }, { id: c }],
    });
    vm.endStream(b); // deleted after it left the count: nothing moves
    vm.endStream(a);
    expect(ask(host, vm)!.report).toMatchObject({
      inflight: 1,
      vm_inflight: 1,
      holders: [{ id: c }],
    });
    vm.endStream(c);
    expect(ask(host, vm)!.report).toMatchObject({ inflight: 0, vm_inflight: 0, holders: [] });
  });

  test("a body that would pass 16384 bytes (paths of escaped bytes) names the oldest that fit; vm_inflight counts all", () => {
    const host = new ProxyWasmHost({ keepRequestHeaders: true });
    const vm = host.createVm();
    const path = "/" + "\u0001".repeat(400); // 256 bytes kept, each \u0001 (6 bytes) but the first
    for (let i = 0; i < 40; i++) {
      vm.requestHeaders(vm.createStream(), { ":method": "GET", ":path": path });
    }
    drain(host, vm);
    const { call, report } = ask(host, vm)!;
    expect(Buffer.byteLength(call.body)).toBeLessThanOrEqual(16384);
    expect(report.vm_inflight).toBe(40);
    expect(report.holders!.length).toBeGreaterThan(5);
    expect(report.holders!.length).toBeLessThan(32);
    expect(ids(report)).toEqual(vm.streamIds.slice(0, report.holders!.length));
    expect(report.holders![0]!.path).toBe("/" + "\u0001".repeat(255));
  });

  test("any path bytes: the JSON string is the first 256 bytes (one char each), query removed, only printable ASCII on the wire; an empty one is left out", () => {
    const host = new ProxyWasmHost({ keepRequestHeaders: true });
    const vm = host.createVm();
    drain(host, vm);
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 600 }), (bytes) => {
        const text = Buffer.from(bytes).toString("latin1");
        const id = vm.createStream();
        vm.requestHeaders(id, { ":method": "GET", ":path": text });
        const { call, report } = ask(host, vm)!;
        vm.endStream(id);
        expect(/^[\x20-\x7e]*$/.test(call.body)).toBe(true);
        const path = text.split("?")[0]!.slice(0, 256);
        expect(report.holders).toEqual([
          path === ""
            ? expect.not.objectContaining({ path: expect.anything() })
            : expect.objectContaining({ id, path }),
        ]);
        expect(report.holders![0]!.id).toBe(id);
      }),
      { numRuns: 300 },
    );
  });
});

describe("x-lastcall-holders", () => {
  test("only 1 to 32 in decimal (no sign, no leading zero, no spaces) gets a holders report, of that many", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm();
    for (let i = 0; i < 40; i++) vm.createStream();
    drain(host, vm);
    const valid = /^(?:[1-9]|[12]\d|3[0-2])$/;
    const values = fc.oneof(
      fc.string({ maxLength: 6 }),
      fc.integer({ min: -5, max: 40 }).map(String),
      fc.tuple(
        fc.constantFrom("", " ", "0", "+", "-", "\t"),
        fc.integer({ min: 0, max: 33 }),
        fc.constantFrom("", " ", "0", ".0", "x"),
      ).map(([a, n, b]) => `${a}${n}${b}`),
    );
    fc.assert(
      fc.property(values, (value) => {
        const asked = ask(host, vm, value);
        if (valid.test(value)) {
          expect(ids(asked?.report)).toEqual(vm.streamIds.slice(0, Number(value)));
        } else expect(asked).toBeUndefined();
      }),
      { numRuns: 500 },
    );
    for (const value of ["1", "32"]) expect(ask(host, vm, value)).toBeDefined();
    for (const value of ["0", "33", "01", "+1", " 1", "1 ", "1e1", "", "320"]) {
      expect(ask(host, vm, value)).toBeUndefined();
    }
  });
});

describe("the table of live ids", () => {
  test("ids colliding mod 16384: the first keeps the slot; the other is counted, not named, and its end does not clear the slot", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm();
    drain(host, vm);
    vm.createStream({ id: 5 });
    vm.createStream({ id: 5 + SLOTS });
    expect(ask(host, vm)!.report).toMatchObject({ vm_inflight: 2, holders: [{ id: 5 }] });
    vm.endStream(5 + SLOTS);
    expect(ask(host, vm)!.report).toMatchObject({ vm_inflight: 1, holders: [{ id: 5 }] });
    vm.createStream({ id: 5 + 2 * SLOTS });
    vm.endStream(5);
    expect(ask(host, vm)!.report).toMatchObject({ vm_inflight: 1, holders: [] }); // the slot was held when it came
    vm.createStream({ id: 5 + 3 * SLOTS });
    expect(ask(host, vm)!.report).toMatchObject({
      vm_inflight: 2,
      holders: [{ id: 5 + 3 * SLOTS }],
    });
  });

  test("more live streams than slots: the oldest keep theirs, the 32 oldest are named, vm_inflight is exact", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm();
    const live = Array.from({ length: SLOTS + 100 }, () => vm.createStream());
    drain(host, vm);
    expect(ask(host, vm)!.report).toMatchObject({
      vm_inflight: SLOTS + 100,
      inflight: SLOTS + 100,
    });
    expect(ids(ask(host, vm)!.report)).toEqual(live.slice(0, 32));
    for (const id of live.slice(0, 40)) vm.endStream(id);
    // The 100 newest shared slots with older streams: those that are free now stay free (no re-tracking).
    expect(ids(ask(host, vm)!.report)).toEqual(live.slice(40, 72));
    expect(ask(host, vm)!.report.vm_inflight).toBe(SLOTS + 60);
  });

  // A model of the table: a slot takes an id at creation when free; it is freed when the id that
  // holds it leaves the count. Random creates (ids chosen to collide), excluded paths and deletions.
  test("in random create/exclude/delete sequences: tracked ids ⊆ live ids, every live id whose slot was free at creation is tracked", () => {
    const action = fc.oneof(
      fc.record({
        t: fc.constant("create" as const),
        slot: fc.integer({ min: 2, max: 9 }),
        lap: fc.nat(4),
      }),
      fc.record({ t: fc.constant("exclude" as const), pick: fc.nat() }),
      fc.record({ t: fc.constant("end" as const), pick: fc.nat() }),
    );
    fc.assert(
      fc.property(fc.array(action, { minLength: 1, maxLength: 60 }), (actions) => {
        const host = new ProxyWasmHost();
        const vm = host.createVm({ configuration: EXCLUDING });
        drain(host, vm);
        const counted = new Set<number>(); // live ids in the count
        const live = new Set<number>();
        const freeAtCreation = new Set<number>();
        const table = new Map<number, number>(); // slot -> id
        for (const a of actions) {
          if (a.t === "create") {
            const id = a.slot + a.lap * SLOTS;
            if (live.has(id)) continue;
            vm.createStream({ id });
            live.add(id);
            counted.add(id);
            if (!table.has(id % SLOTS)) {
              table.set(id % SLOTS, id);
              freeAtCreation.add(id);
            }
          } else {
            const pool = a.t === "exclude" ? [...counted] : [...live];
            if (pool.length === 0) continue;
            const id = pool[a.pick % pool.length]!;
            if (a.t === "exclude") vm.requestHeaders(id, { ":path": "/healthz" });
            else {
              vm.endStream(id);
              live.delete(id);
            }
            if (counted.delete(id) && table.get(id % SLOTS) === id) {
              table.delete(id % SLOTS);
              freeAtCreation.delete(id);
            }
          }
          const report = ask(host, vm)!.report;
          const tracked = ids(report)!;
          expect(report.vm_inflight).toBe(counted.size);
          expect(tracked.every((id) => counted.has(id))).toBe(true);
          expect([...freeAtCreation].every((id) => tracked.includes(id))).toBe(true);
          expect(tracked).toEqual([...table.values()].sort((x, y) => x - y));
        }
      }),
      { numRuns: 200 },
    );
  });
});
