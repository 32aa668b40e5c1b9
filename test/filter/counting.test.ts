import { describe, expect, test } from "vitest";
import { type FilterVm, ProxyWasmHost, WasmResult } from "../support/proxy-wasm-host.ts";
import { prng } from "./prng.ts";

const GAUGE = "wasmcustom.lastcall_inflight";
const TOTAL = "wasmcustom.lastcall_streams_total";
const CONFIG = JSON.stringify({ exclude_paths: ["/healthz", "/internal/*"], heartbeat_ms: 0 });

interface Live { vm: FilterVm; id: number; counted: boolean; headers: boolean }

// Checks after every host call that changes the count or the gauge that 0 ≤ counter ≤ gauge ≤ live
// contexts: the gauge is an upper bound of the counter at every instant, not only when quiescent.
function watchGauge(host: ProxyWasmHost): { checks: number; maxLead: number } {
  const seen = { checks: 0, maxLead: 0 };
  host.afterHostCall = ({ call, key }) => {
    if (!(call === "proxy_set_shared_data" && key === "lastcall.inflight") && key !== GAUGE) return;
    const count = host.inflight()!.count;
    const gauge = host.metric(GAUGE)!;
    const live = host.vms.reduce((sum, vm) => sum + vm.liveStreams, 0);
    if (!(count >= 0 && count <= gauge && gauge <= live)) throw new Error(`counter ${count}, gauge ${gauge}, live ${live}`);
    seen.checks++;
    seen.maxLead = Math.max(seen.maxLead, gauge - count);
  };
  return seen;
}

// Drives `steps` random events over `vmCount` VMs; checks the count against the truth as it goes.
function run(seed: number, steps: number, vmCount: number, host: ProxyWasmHost) {
  const random = prng(seed);
  const vms = Array.from({ length: vmCount }, () => host.createVm({ configuration: CONFIG }));
  const live: Live[] = [];
  let counted = 0;
  let finishedCounted = 0;
  let changes = 0;
  const pick = <T>(items: T[]) => items[Math.floor(random() * items.length)]!;
  const check = () => {
    expect(host.inflight()!.count).toBe(counted);
    expect(host.metric(GAUGE)).toBe(counted);
  };
  for (let step = 0; step < steps; step++) {
    const roll = random();
    if (roll < 0.45 || live.length === 0) {
      const vm = pick(vms);
      live.push({ vm, id: vm.createStream(), counted: true, headers: false });
      counted++;
      changes++;
    } else if (roll < 0.7) {
      const stream = pick(live.filter((s) => !s.headers)) ?? pick(live);
      if (stream.headers) continue;
      stream.headers = true;
      const path = pick(["/", "/api/users?id=1", "/healthz", "/healthz?probe=1", "/internal/metrics", "/internal", "/healthzz"]);
      stream.vm.requestHeaders(stream.id, { ":path": path, ":method": "GET", ":authority": "app" });
      if (["/healthz", "/internal/metrics"].includes(path.split("?")[0]!)) {
        stream.counted = false;
        counted--;
        changes++;
      }
    } else if (roll < 0.75) {
      // local reply from an earlier filter: response headers without request headers
      const stream = pick(live);
      stream.vm.responseHeaders(stream.id);
    } else {
      // ends: completed, reset before headers, or reset mid-stream, all the same to the host
      const index = Math.floor(random() * live.length);
      const [stream] = live.splice(index, 1);
      stream!.vm.endStream(stream!.id);
      if (stream!.counted) {
        counted--;
        finishedCounted++;
        changes++;
      }
    }
    if (step % 97 === 0) check();
  }
  check();
  for (const stream of live.splice(0)) {
    stream.vm.endStream(stream.id);
    if (stream.counted) {
      counted--;
      finishedCounted++;
      changes++;
    }
  }
  return { vms, finishedCounted, changes };
}

describe("counting across worker VMs", () => {
  test("thousands of overlapping streams in random order end at exactly zero", () => {
    for (const seed of [1, 2, 3]) {
      const host = new ProxyWasmHost();
      const gauge = watchGauge(host);
      const { vms, finishedCounted, changes } = run(seed, 6000, 4, host);
      expect(gauge.checks).toBeGreaterThan(2 * changes);
      expect(host.inflight()).toEqual({ count: 0, version: changes });
      expect(host.metric(GAUGE)).toBe(0);
      expect(host.metric(TOTAL)).toBe(finishedCounted);
      expect(vms.every((vm) => vm.failed === undefined && vm.liveStreams === 0)).toBe(true);
      expect(host.calls).toHaveLength(0); // not draining, no heartbeat: no per-request calls
    }
  });

  test("a worker that wins the race between get and set makes the loser retry, losing nothing", () => {
    const host = new ProxyWasmHost();
    const random = prng(42);
    const vms = Array.from({ length: 3 }, () => host.createVm({ configuration: CONFIG }));
    const ids: Map<FilterVm, number[]> = new Map(vms.map((vm) => [vm, []]));
    let racing = false;
    let expected = 0;
    const gauge = watchGauge(host);
    host.beforeHostCall = ({ vm, call, key }) => {
      if (racing || call !== "proxy_set_shared_data" || key !== "lastcall.inflight" || random() < 0.5) return;
      racing = true; // another worker runs to completion between this VM's get and set
      const other = vms.find((candidate) => candidate !== vm)!;
      ids.get(other)!.push(other.createStream());
      expected++;
      racing = false;
    };
    for (let i = 0; i < 2000; i++) {
      const vm = vms[i % 3]!;
      const mine = ids.get(vm)!;
      if (mine.length > 0 && random() < 0.45) {
        vm.endStream(mine.splice(Math.floor(random() * mine.length), 1)[0]!);
        expected--;
      } else {
        mine.push(vm.createStream());
        expected++;
      }
      expect(host.inflight()!.count).toBe(expected);
    }
    expect(host.casMismatches).toBeGreaterThan(500);
    expect(gauge.maxLead).toBeGreaterThanOrEqual(1); // the gauge rose before the CAS that counted
    expect(host.metric(GAUGE)).toBe(expected);
    host.beforeHostCall = undefined;
    for (const [vm, mine] of ids) for (const id of mine) vm.endStream(id);
    expect(host.inflight()!.count).toBe(0);
    expect(host.metric(GAUGE)).toBe(0);
  });

  test.each([["proxy_get_shared_data"], ["proxy_set_shared_data"]])("a +1 failed by the host at %s is not counted: its end does not decrement", (failing) => {
    const host = new ProxyWasmHost();
    const vm = host.createVm({ configuration: CONFIG });
    watchGauge(host);
    const counted = vm.createStream();
    host.beforeHostCall = ({ call, key, callback }) =>
      call === failing && key === "lastcall.inflight" && callback === "proxy_on_context_create" ? WasmResult.InternalFailure : undefined;
    const failed = [vm.createStream(), vm.createStream()];
    host.beforeHostCall = undefined;
    expect(host.inflight()).toEqual({ count: 1, version: 1 });
    expect(host.metric(GAUGE)).toBe(1); // raised, then lowered again
    vm.requestHeaders(failed[0]!, { ":path": "/healthz" }); // excluded, but was never counted
    vm.endStream(failed[0]!);
    vm.endStream(failed[1]!);
    expect(host.inflight()).toEqual({ count: 1, version: 1 });
    expect(host.metric(GAUGE)).toBe(1);
    expect(host.metric(TOTAL)).toBe(0);
    vm.endStream(counted);
    expect(host.inflight()).toEqual({ count: 0, version: 2 });
    expect(host.metric(GAUGE)).toBe(0);
    expect(host.metric(TOTAL)).toBe(1);
  });

  test("a stream reset before its headers is counted from create to delete", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm({ configuration: CONFIG });
    const id = vm.createStream();
    expect(host.inflight()).toEqual({ count: 1, version: 1 });
    vm.endStream(id);
    expect(host.inflight()).toEqual({ count: 0, version: 2 });
    expect(host.metric(TOTAL)).toBe(1);
  });

  test("an excluded path leaves the count at its headers, once, and is not a counted stream", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm({ configuration: CONFIG });
    const id = vm.createStream();
    vm.requestHeaders(id, { ":path": "/internal/debug?x=1" });
    expect(host.inflight()!.count).toBe(0);
    vm.requestHeaders(id, { ":path": "/internal/debug" }); // a second delivery changes nothing
    vm.endStream(id);
    expect(host.inflight()).toEqual({ count: 0, version: 2 });
    expect(host.metric(GAUGE)).toBe(0);
    expect(host.metric(TOTAL)).toBe(0);
  });

  test("prefix entries match by prefix and exact entries only exactly", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm({ configuration: JSON.stringify({ exclude_paths: ["/a*", "/b"], heartbeat_ms: 0 }) });
    const paths = ["/a", "/abc", "/a/b?c", "/b", "/b?x", "/bc", "/", "/c/a"];
    const ids = paths.map((path) => {
      const id = vm.createStream();
      vm.requestHeaders(id, { ":path": path });
      return id;
    });
    expect(host.inflight()!.count).toBe(3); // /bc, /, /c/a
    for (const id of ids) vm.endStream(id);
    expect(host.metric(TOTAL)).toBe(3);
  });

  test("a network-filter connection is in flight from creation to deletion", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm({ vmId: "lastcall_inflight_tcp", configuration: '{"heartbeat_ms":0}' });
    const id = vm.createStream();
    expect(vm.newConnection(id)).toBe(0);
    expect(host.inflight("lastcall_inflight_tcp")!.count).toBe(1);
    vm.downstreamClose(id);
    expect(host.inflight("lastcall_inflight_tcp")!.count).toBe(1);
    vm.endStream(id);
    expect(host.inflight("lastcall_inflight_tcp")).toEqual({ count: 0, version: 2 });
    expect(host.inflight()).toBeUndefined(); // another vm_id, another namespace
  });

  test("the first configure creates the keys; later VMs find them and keep them", () => {
    const host = new ProxyWasmHost();
    const first = host.createVm({ configuration: CONFIG });
    expect(host.inflight()).toEqual({ count: 0, version: 0 });
    expect(host.sharedData("lastcall.draining")!.value).toEqual(new Uint8Array([0]));
    const id = first.createStream();
    host.createVm({ configuration: CONFIG });
    expect(host.inflight()).toEqual({ count: 1, version: 1 });
    first.endStream(id);
  });
});

test("the module imports only proxy-wasm ABI functions", () => {
  const imports = new ProxyWasmHost().imports();
  expect(imports.filter((name) => !/^env\.proxy_[a-z_]+$/.test(name))).toEqual([]);
  expect(imports.sort()).toEqual([
    "env.proxy_define_metric", "env.proxy_get_buffer_bytes", "env.proxy_get_header_map_value",
    "env.proxy_get_property", "env.proxy_get_shared_data", "env.proxy_http_call", "env.proxy_increment_metric",
    "env.proxy_log", "env.proxy_set_shared_data", "env.proxy_set_tick_period_milliseconds",
  ]);
});
