// What holds a drain: the holders part of a report is parsed strictly, the book keeps each VM's
// latest answer, asks each VM about once a second while a drain waits (never outside one), shows
// the oldest first, and drops a process at zero. Listener names come from Envoy's admin JSON.
import fc from "fast-check";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import {
  HolderBook,
  HOLDERS_REFRESH_MS,
  MAX_HOLDERS,
  parseHolders,
} from "../../agent/drain/holders.ts";
import { type InflightReport, InflightTracker, parseReport } from "../../agent/drain/in-flight.ts";
import { listenerAt, parseListenerNames } from "../../agent/envoy/listeners.ts";
import { ReportDesk } from "../../agent/status/reports.ts";

describe("parseHolders / parseReport", () => {
  it("reads vm, vm_inflight and the holders; start_ns becomes milliseconds", () => {
    const report = parseReport({
      instance: "a",
      epoch: 1,
      inflight: 3,
      draining: true,
      reason: "holders",
      vm: "1732440000123456789",
      vm_inflight: 3,
      holders: [{
        id: 12,
        start_ns: 1_732_440_000_123_456_789,
        method: "GET",
        path: "/slow",
        address: "127.0.0.1:8080",
      }, { id: 40 }],
    });
    expect(report.vm).toBe("1732440000123456789");
    expect(report.holders).toEqual({
      vmInflight: 3,
      holders: [{
        id: 12,
        startMs: 1_732_440_000_123,
        method: "GET",
        path: "/slow",
        address: "127.0.0.1:8080",
      }, { id: 40 }],
    });
  });

  it("the filter's bytes are read back as UTF-8 (a byte that is not becomes U+FFFD)", () => {
    const parsed = parseHolders({
      vm_inflight: 2,
      holders: [{ id: 1, path: "/caf\u00c3\u00a9" }, { id: 2, path: "/x\u00ff" }],
    });
    expect(parsed!.holders.map((h) => h.path)).toEqual(["/café", "/x\ufffd"]);
  });

  it("a report without holders has none", () => {
    expect(
      parseReport({
        instance: "a",
        epoch: 0,
        inflight: 0,
        draining: false,
        reason: "heartbeat",
        vm: "7",
      }).holders,
    ).toBeUndefined();
  });

  it.each([
    [{ vm: 7 }, /vm is not a VM id: 7/],
    [{ vm: "12a" }, /vm is not a VM id/],
    [{ vm: "1".repeat(21) }, /vm is not a VM id/],
    [{ holders: {} }, /holders is not a list/],
    [
      { holders: Array(MAX_HOLDERS + 1).fill({ id: 1 }), vm_inflight: 40 },
      /holders is not a list of at most 32/,
    ],
    [{ holders: [{ id: 1 }] }, /vm_inflight is not a count: undefined/],
    [{ holders: [{ id: -1 }], vm_inflight: 1 }, /holder id is not a context id/],
    [{ holders: ["x"], vm_inflight: 1 }, /holder id is not a context id: "x"/],
  ])("refuses %j, naming the field", (fields, message) => {
    expect(() =>
      parseReport({
        instance: "a",
        epoch: 0,
        inflight: 1,
        draining: true,
        reason: "holders",
        ...fields,
      })
    ).toThrow(message);
  });

  it("never throws anything but a TypeError, whatever the holders (property)", () => {
    fc.assert(fc.property(fc.anything(), fc.anything(), (holders, vmInflight) => {
      try {
        const parsed = parseHolders({ holders, vm_inflight: vmInflight });
        if (parsed) {
          for (const h of parsed.holders) expect(Number.isSafeInteger(h.id)).toBe(true);
        }
      } catch (error) {
        expect(error).toBeInstanceOf(TypeError);
      }
    }));
  });
});

describe("HolderBook", () => {
  let now = 1_000_000;
  const clock = () => now;
  const named = (
    _instance: string,
    address: string,
  ) => (address.endsWith(":8080") ? "inbound" : undefined);

  it("shows every VM's holders, oldest first, with ages that grow, and listeners by name or address", () => {
    const book = new HolderBook({ now: clock });
    book.record("a", 0, "1", {
      vmInflight: 2,
      holders: [{
        id: 3,
        startMs: now - 5000,
        method: "GET",
        path: "/old",
        address: "127.0.0.1:8080",
      }, { id: 9, startMs: now - 100, address: "127.0.0.1:9090" }],
    });
    book.record("a", 0, "2", {
      vmInflight: 1,
      holders: [{
        id: 4,
        startMs: now - 2000,
        method: "POST",
        path: "/up",
        address: "127.0.0.1:8080",
      }],
    });
    const first = book.now(["a"], named, () => 3);
    expect(first.holders.map((h) => [h.path ?? h.address, h.listener, h.age_ms])).toEqual([
      ["/old", "inbound", 5000],
      ["/up", "inbound", 2000],
      ["127.0.0.1:9090", "127.0.0.1:9090", 100],
    ]);
    expect(first.byListener).toEqual({ inbound: 2, "127.0.0.1:9090": 1 });
    expect(first.unnamed).toBe(0);
    now += 1500;
    expect(book.now(["a"], named, () => 3).holders[0].age_ms).toBe(6500);
  });

  it("counts what a VM counted but did not name; a process at zero or forgotten holds nothing", () => {
    const book = new HolderBook({ now: clock });
    book.record("a", 0, "1", {
      vmInflight: 40,
      holders: Array.from({ length: 32 }, (_, i) => ({ id: i + 1 })),
    });
    book.record("b", 1, "1", { vmInflight: 1, holders: [{ id: 1 }] });
    const both = book.now(["a", "b"], named, () => 1);
    expect(both.holders).toHaveLength(33);
    expect(both.unnamed).toBe(8);
    expect(both.byListener["(unnamed)"]).toBe(8);
    expect(book.now(["a", "b"], named, (i) => (i === "a" ? 0 : 1)).holders).toHaveLength(1);
    book.forget("b");
    expect(book.now(["b"], named, () => 1).holders).toEqual([]);
  });

  it("a VM's new answer replaces its old one; a VM silent for 5 s is left out", () => {
    const book = new HolderBook({ now: clock });
    book.record("a", 0, "1", { vmInflight: 2, holders: [{ id: 1 }, { id: 2 }] });
    book.record("a", 0, "1", { vmInflight: 1, holders: [{ id: 2 }] });
    expect(book.now(["a"], named, () => 1).holders).toHaveLength(1);
    now += 5001;
    expect(book.now(["a"], named, () => 1).holders).toEqual([]);
  });

  it("asks each VM at most once a second, and not while its answer is fresh", () => {
    const book = new HolderBook({ now: clock });
    expect(book.wants("a", "1")).toBe(true);
    expect(book.wants("a", "1")).toBe(false); // asked just now
    expect(book.wants("a", "2")).toBe(true); // another VM
    now += HOLDERS_REFRESH_MS;
    book.record("a", 0, "1", { vmInflight: 0, holders: [] });
    expect(book.wants("a", "1")).toBe(false); // fresh answer
    now += HOLDERS_REFRESH_MS;
    expect(book.wants("a", "1")).toBe(true);
  });
});

describe("ReportDesk asks for holders during a drain only", () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());
  const report = (fields: Partial<InflightReport>): InflightReport => ({
    instance: "a",
    epoch: 0,
    inflight: 1,
    draining: true,
    reason: "heartbeat",
    vm: "5",
    ...fields,
  });

  it("outside a drain: no ask; in a drain: the answer asks for 32, the holders report is kept", async () => {
    const tracker = new InflightTracker({ heartbeatMs: 1000, now: () => Date.now() });
    tracker.expect("a");
    const book = new HolderBook({ now: () => Date.now() });
    const drain = { on: false };
    const desk = new ReportDesk(tracker, {
      heartbeatMs: 1000,
      draining: () => drain.on,
      holders: book,
    });
    const quiet = desk.answer(report({ draining: false }));
    await vi.advanceTimersByTimeAsync(1000);
    expect((await quiet).holders).toBeUndefined();
    drain.on = true;
    const asked = desk.answer(report({}));
    await vi.advanceTimersByTimeAsync(1000);
    expect((await asked).holders).toBe(MAX_HOLDERS);
    const answer = desk.answer(
      report({ reason: "holders", holders: { vmInflight: 1, holders: [{ id: 7, path: "/x" }] } }),
    );
    await vi.advanceTimersByTimeAsync(1000);
    expect((await answer).holders).toBeUndefined(); // its answer is fresh
    expect(book.now(["a"], () => undefined, () => 1).holders).toEqual([{
      epoch: 0,
      listener: "(unknown)",
      path: "/x",
    }]);
  });
});

describe("ReportDesk gives each VM its id", () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it("a report without vm gets the next id (unique across Envoys); one with an id gets none; without a holder book, none", async () => {
    const tracker = new InflightTracker({ heartbeatMs: 1000, now: () => Date.now() });
    for (const id of ["a", "b"]) tracker.expect(id);
    const desk = new ReportDesk(tracker, {
      heartbeatMs: 1000,
      draining: () => false,
      holders: new HolderBook(),
    });
    const plain = new ReportDesk(tracker, { heartbeatMs: 1000, draining: () => false });
    const report = (instance: string, vm?: string): InflightReport => ({
      instance,
      epoch: 0,
      inflight: 0,
      draining: false,
      reason: "heartbeat",
      ...(vm ? { vm } : {}),
    });
    const answers = [
      desk.answer(report("a")),
      desk.answer(report("b")),
      desk.answer(report("a", "1")),
      plain.answer(report("a")),
    ];
    await vi.advanceTimersByTimeAsync(1000);
    expect((await Promise.all(answers)).map((a) => a.vm)).toEqual(["1", "2", undefined, undefined]);
  });
});

describe("listener names from Envoy's admin", () => {
  it("by port, additional addresses included; anything else skipped", () => {
    const names = parseListenerNames(JSON.stringify({
      listener_statuses: [
        {
          name: "inbound",
          local_address: { socket_address: { address: "0.0.0.0", port_value: 15006 } },
        },
        {
          name: "dual",
          local_address: { socket_address: { address: "0.0.0.0", port_value: 80 } },
          additional_local_addresses: [{ socket_address: { address: "::", port_value: 81 } }],
        },
        { name: 7 },
        null,
        { name: "pipe", local_address: { pipe: { path: "/x" } } },
      ],
    }));
    expect([...names]).toEqual([[15006, "inbound"], [80, "dual"], [81, "dual"]]);
    expect(listenerAt(names, "10.0.0.7:15006")).toBe("inbound");
    expect(listenerAt(names, "[::1]:81")).toBe("dual");
    expect(listenerAt(names, "127.0.0.1:1")).toBeUndefined();
  });

  it("never throws (property)", () => {
    fc.assert(fc.property(fc.string(), fc.anything(), (text, value) => {
      parseListenerNames(text);
      parseListenerNames(JSON.stringify({ listener_statuses: value }) ?? "");
    }));
  });
});
