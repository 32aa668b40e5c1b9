// `holder_paths` in the in-process host: the filter reads a holder's method and path while its
// request headers are there, and keeps them until the stream leaves.
import fc from "fast-check";
import { describe, expect, test } from "vitest";
import { ProxyWasmHost } from "../support/proxy-wasm-host.ts";
import { ask, drain, SLOTS } from "./holders-host.ts";

// `holder_paths` (docs/filter-protocol.md, "Holders"): Envoy 1.40 forgets a stream's request
// headers when its headers callback returns, so with the key on the filter reads `:method` and
// `:path` there, for a stream that owns its slot, and keeps them until the stream leaves. The
// default host is Envoy-like here: the properties read later are NotFound.
describe("holder_paths", () => {
  const KEEPING = '{"holder_paths":true}';

  test("on: the kept method and path are named though the host forgot the headers; query cut, 256 bytes, method 16 bytes, escaped", () => {
    const host = new ProxyWasmHost({ clock: () => 42n });
    const vm = host.createVm({ configuration: KEEPING });
    const a = vm.createStream({ startNs: 1n });
    const b = vm.createStream({ startNs: 2n });
    const c = vm.createStream({ startNs: 3n });
    const d = vm.createStream({ startNs: 4n });
    const e = vm.createStream({ startNs: 5n }); // its headers never come
    vm.requestHeaders(a, { ":method": "GET", ":path": "/first?token=secret", ":authority": "app" });
    vm.requestHeaders(b, { ":method": "POST", ":path": '/b"\\\u0001\u007f\u00e9?q=\u00ff' });
    vm.requestHeaders(c, { ":method": "PUT", ":path": "/" + "x".repeat(600) });
    vm.requestHeaders(d, { ":method": "VERY_LONG_METHOD_NAME", ":path": "?only=query" });
    drain(host, vm);
    const { call, report } = ask(host, vm)!;
    expect(call.body).toBe(
      '{"instance":"","epoch":0,"inflight":5,"draining":true,"reason":"holders","vm":"42","vm_inflight":5,"holders":[' +
        '{"id":2,"start_ns":1,"method":"GET","path":"/first","address":"127.0.0.1:10000","protocol":"HTTP/1.1","cluster":"app"},' +
        '{"id":3,"start_ns":2,"method":"POST","path":"/b\\"\\\\\\u0001\\u007f\\u00e9","address":"127.0.0.1:10000","protocol":"HTTP/1.1","cluster":"app"},' +
        `{"id":4,"start_ns":3,"method":"PUT","path":"/${
          "x".repeat(255)
        }","address":"127.0.0.1:10000","protocol":"HTTP/1.1","cluster":"app"},` +
        '{"id":5,"start_ns":4,"method":"VERY_LONG_METHOD","address":"127.0.0.1:10000","protocol":"HTTP/1.1","cluster":"app"},' +
        '{"id":6,"start_ns":5,"address":"127.0.0.1:10000","protocol":"HTTP/1.1","cluster":"app"}]}',
    );
    expect(report.holders!.map((h) => h.id)).toEqual([a, b, c, d, e]);
    expect(call.body).not.toContain("secret");
    expect(call.effectiveContext).toBe(vm.rootContextId);
  });

  test("on: any method and path bytes are named as the host gave them at the headers (first 16 / first 256 before '?'), printable ASCII on the wire", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm({ configuration: KEEPING });
    drain(host, vm);
    const bytes = (max: number) =>
      fc.uint8Array({ maxLength: max }).map((b) => Buffer.from(b).toString("latin1"));
    fc.assert(
      fc.property(bytes(40), bytes(700), (method, path) => {
        const id = vm.createStream();
        vm.requestHeaders(id, { ":method": method, ":path": path });
        const { call, report } = ask(host, vm)!;
        vm.endStream(id);
        expect(/^[\x20-\x7e]*$/.test(call.body)).toBe(true);
        const holder = report.holders![0]!;
        expect(holder.id).toBe(id);
        expect(holder.method).toBe(method === "" ? undefined : method.slice(0, 16));
        const kept = path.slice(0, 256).split("?")[0]!;
        expect(holder.path).toBe(kept === "" ? undefined : kept);
      }),
      { numRuns: 300 },
    );
  });

  test("a slot reused by a later stream never names the earlier stream's method or path", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm({ configuration: KEEPING });
    drain(host, vm);
    vm.createStream({ id: 5 });
    vm.requestHeaders(5, { ":method": "DELETE", ":path": "/earlier" });
    vm.endStream(5);
    vm.createStream({ id: 5 + SLOTS }); // takes the freed slot; no headers yet
    expect(ask(host, vm)!.report.holders).toEqual([
      expect.not.objectContaining({ path: expect.anything() }),
    ]);
    vm.requestHeaders(5 + SLOTS, { ":method": "GET", ":path": "/later" });
    expect(ask(host, vm)!.report.holders).toEqual([
      expect.objectContaining({ id: 5 + SLOTS, method: "GET", path: "/later" }),
    ]);
    // A stream whose slot is taken keeps nothing: the slot's owner is named with its own request.
    vm.createStream({ id: 5 + 2 * SLOTS });
    vm.requestHeaders(5 + 2 * SLOTS, { ":method": "PUT", ":path": "/untracked" });
    vm.endStream(5 + SLOTS);
    vm.createStream({ id: 5 + 3 * SLOTS });
    const { call } = ask(host, vm)!;
    expect(JSON.parse(call.body).holders).toEqual([
      expect.not.objectContaining({ path: expect.anything() }),
    ]);
    expect(call.body).not.toMatch(/earlier|later|untracked/);
  });

  // A model: a named holder carries the method and path of ITS OWN request headers (the later
  // ones if delivered twice) when it owned its slot at them, and nothing otherwise.
  test("in random create/headers/exclude/delete sequences with colliding ids, every named holder carries its own request or none", () => {
    const action = fc.oneof(
      fc.record({
        t: fc.constant("create" as const),
        slot: fc.integer({ min: 2, max: 6 }),
        lap: fc.nat(3),
      }),
      fc.record({
        t: fc.constant("headers" as const),
        pick: fc.nat(),
        path: fc.constantFrom("/a", "/b?x=1", "/healthz", "/c"),
      }),
      fc.record({ t: fc.constant("end" as const), pick: fc.nat() }),
    );
    fc.assert(
      fc.property(fc.array(action, { minLength: 1, maxLength: 60 }), (actions) => {
        const host = new ProxyWasmHost();
        const vm = host.createVm({
          configuration: '{"holder_paths":true,"exclude_paths":["/healthz"]}',
        });
        drain(host, vm);
        const live: number[] = [];
        const slots = new Map<number, number>(); // slot -> tracked id
        const kept = new Map<number, string>(); // tracked id -> its kept path
        for (const a of actions) {
          if (a.t === "create") {
            const id = a.slot + a.lap * SLOTS;
            if (live.includes(id) || vm.streamIds.includes(id)) continue;
            vm.createStream({ id });
            live.push(id);
            if (!slots.has(id % SLOTS)) slots.set(id % SLOTS, id);
            continue;
          }
          if (live.length === 0) continue;
          const id = live[a.pick % live.length]!;
          const tracked = slots.get(id % SLOTS) === id;
          if (a.t === "headers") {
            vm.requestHeaders(id, { ":method": "GET", ":path": a.path });
            if (a.path === "/healthz") {
              live.splice(live.indexOf(id), 1); // left the count (its deletion is not modelled further)
              if (tracked) {
                slots.delete(id % SLOTS);
                kept.delete(id);
              }
            } else if (tracked) kept.set(id, a.path.split("?")[0]!);
          } else {
            vm.endStream(id);
            live.splice(live.indexOf(id), 1);
            if (tracked) {
              slots.delete(id % SLOTS);
              kept.delete(id);
            }
          }
        }
        const holders = ask(host, vm)!.report.holders!;
        expect(holders.map((h) => h.id)).toEqual([...slots.values()].sort((x, y) => x - y));
        for (const h of holders) {
          expect([h.id, h.path, h.method]).toEqual([
            h.id,
            kept.get(h.id),
            kept.has(h.id) ? "GET" : undefined,
          ]);
        }
      }),
      { numRuns: 300 },
    );
  });

  test("off (the default), a request costs the host calls it cost before: +1 at creation, −1 at deletion, none at its headers (with exclude_paths: the one :path read)", () => {
    const perRequest = (configuration: string) => {
      const host = new ProxyWasmHost();
      const vm = host.createVm({ configuration });
      const seen: string[] = [];
      host.onImport = (_vm, name) => seen.push(name);
      const mark = (what: string) => seen.push(`| ${what}`);
      for (let i = 0; i < 3; i++) {
        mark("create");
        const id = vm.createStream();
        mark("headers");
        vm.requestHeaders(id, { ":method": "GET", ":path": "/api?x=1" });
        mark("delete");
        vm.endStream(id);
      }
      return seen.join(" ");
    };
    const plain = "| create proxy_increment_metric | headers | delete proxy_increment_metric ";
    expect(perRequest("")).toBe(plain.repeat(3).trim());
    expect(perRequest('{"holder_paths":false}')).toBe(plain.repeat(3).trim());
    expect(perRequest('{"exclude_paths":["/healthz"]}'))
      .toBe(
        "| create proxy_increment_metric | headers proxy_get_header_map_value | delete proxy_increment_metric "
          .repeat(3).trim(),
      );
    expect(perRequest(KEEPING))
      .toBe(
        "| create proxy_increment_metric | headers proxy_get_header_map_value proxy_get_header_map_value | delete proxy_increment_metric "
          .repeat(3).trim(),
      );
  });

  test("on: a live stream keeps at most a few hundred bytes of its request, whatever its path's length", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm({ configuration: KEEPING });
    const long = "/" + "p".repeat(64 * 1024);
    const first = vm.createStream();
    vm.requestHeaders(first, { ":method": "GET", ":path": long });
    const before = vm.memorySize;
    for (let i = 0; i < 2000; i++) {
      vm.requestHeaders(vm.createStream(), { ":method": "GET", ":path": long });
    }
    expect(vm.memorySize - before).toBeLessThan(2000 * 1024); // kept whole, they would take 128 MiB
    drain(host, vm);
    expect(ask(host, vm, "1")!.report.holders![0]!.path).toBe(long.slice(0, 256));
  });

  test("on: what a request kept is freed when it ends (memory does not grow with requests served)", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm({ configuration: KEEPING });
    const serve = (n: number) => {
      for (let i = 0; i < n; i++) {
        const id = vm.createStream();
        vm.requestHeaders(id, { ":method": "GET", ":path": `/${"q".repeat(250)}?n=${i}` });
        vm.endStream(id);
      }
    };
    serve(100); // the table of kept entries (256 KiB) is taken at the first request
    const before = vm.memorySize;
    serve(20_000); // every slot used once or more
    expect(vm.memorySize - before).toBeLessThan(256 * 1024); // kept until reuse, 16384 × ~300 bytes would be ~5 MiB
  });
});
