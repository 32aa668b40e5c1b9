// Counting (docs/filter-protocol.md, "Counting"): one process-wide gauge moved +1/−1 by every
// worker VM, exact after every host call; outside a drain nothing else, not even memory.
import { describe, expect, test } from "vitest";
import { type FilterVm, ProxyWasmHost } from "../support/proxy-wasm-host.ts";
import { prng } from "./prng.ts";
import { gaugeName, Truth } from "./truth.ts";

const GAUGE = gaugeName(0);
const TOTAL = "wasmcustom.lastcall_streams_total";
const EXCLUDING = JSON.stringify({ exclude_paths: ["/healthz", "/internal/*"], heartbeat_ms: 0 });
const PLAIN = '{"heartbeat_ms":0}';
const PATHS = [
  "/",
  "/api/users?id=1",
  "/healthz",
  "/healthz?probe=1",
  "/internal/metrics",
  "/internal",
  "/healthzz",
  "/internal/",
];
const excludedBy = (config: string, path: string) =>
  config === EXCLUDING &&
  ["/healthz", "/internal/metrics", "/internal/"].includes(path.split("?")[0]!);

interface Live {
  vm: FilterVm;
  config: string;
  id: number;
  counted: boolean;
  headers: boolean;
}

/** A host whose gauge is checked against the true count after every host call. */
function watched(gauge = GAUGE): { host: ProxyWasmHost; truth: Truth } {
  const host = new ProxyWasmHost();
  const truth = new Truth(host, gauge);
  host.afterHostCall = (point) => truth.observe(point);
  return { host, truth };
}

describe("counting across worker VMs", () => {
  test("thousands of overlapping streams in random order end at exactly zero; the gauge is the true count after every host call", () => {
    for (const seed of [1, 2, 3]) {
      const { host, truth } = watched();
      const random = prng(seed);
      const configs = [EXCLUDING, PLAIN, EXCLUDING, PLAIN];
      const vms = configs.map((configuration) => host.createVm({ configuration }));
      const pick = <T>(items: T[]) => items[Math.floor(random() * items.length)]!;
      const live: Live[] = [];
      let finished = 0;
      let moves = 0;
      const end = (stream: Live) => {
        truth.run(stream.vm, stream.counted ? -1 : 0, () => stream.vm.endStream(stream.id));
        if (stream.counted) {
          finished++;
          moves++;
        }
      };
      for (let step = 0; step < 6000; step++) {
        const roll = random();
        if (roll < 0.45 || live.length === 0) {
          const index = Math.floor(random() * vms.length);
          const vm = vms[index]!;
          live.push({
            vm,
            config: configs[index]!,
            id: truth.run(vm, 1, () => vm.createStream()),
            counted: true,
            headers: false,
          });
          moves++;
        } else if (roll < 0.7) {
          const stream = pick(live);
          if (stream.headers) continue;
          stream.headers = true;
          const path = pick(PATHS);
          const excluded = excludedBy(stream.config, path);
          truth.run(
            stream.vm,
            excluded ? -1 : 0,
            () =>
              stream.vm.requestHeaders(stream.id, {
                ":path": path,
                ":method": "GET",
                ":authority": "app",
              }),
          );
          if (excluded) {
            stream.counted = false;
            moves++;
          }
        } else if (roll < 0.75) {
          const stream = pick(live); // a local reply from an earlier filter: response headers, maybe no request headers
          truth.run(stream.vm, 0, () => stream.vm.responseHeaders(stream.id));
        } else {
          end(live.splice(Math.floor(random() * live.length), 1)[0]!); // completed or reset: the same to the host
        }
      }
      expect(live.filter((s) => s.counted).length).toBe(truth.gauge());
      for (const stream of live.splice(0)) end(stream);
      expect(truth.checks).toBeGreaterThanOrEqual(moves);
      expect(moves).toBeGreaterThan(5000);
      expect(host.metric(GAUGE)).toBe(0);
      for (const vm of vms) vm.tick();
      expect(host.metric(TOTAL)).toBe(finished);
      expect(vms.every((vm) => vm.failed === undefined && vm.liveStreams === 0)).toBe(true);
      expect(host.calls).toHaveLength(0); // not draining, no heartbeat: no report at all
    }
  });

  test("a stream reset before its headers is counted from create to delete", () => {
    const { host, truth } = watched();
    const vm = host.createVm({ configuration: EXCLUDING });
    const id = truth.run(vm, 1, () => vm.createStream());
    expect(host.metric(GAUGE)).toBe(1);
    truth.run(vm, -1, () => vm.endStream(id));
    expect(host.metric(GAUGE)).toBe(0);
    vm.tick();
    expect(host.metric(TOTAL)).toBe(1);
  });

  test("an excluded path leaves the count at its headers, once, and is not a finished stream", () => {
    const { host, truth } = watched();
    const vm = host.createVm({ configuration: EXCLUDING });
    const id = truth.run(vm, 1, () => vm.createStream());
    truth.run(vm, -1, () => vm.requestHeaders(id, { ":path": "/internal/debug?x=1" }));
    expect(host.metric(GAUGE)).toBe(0);
    truth.run(vm, 0, () => vm.requestHeaders(id, { ":path": "/internal/debug" })); // a second delivery changes nothing
    truth.run(vm, 0, () => vm.endStream(id));
    expect(host.metric(GAUGE)).toBe(0);
    vm.tick();
    expect(host.metric(TOTAL)).toBe(0);
  });

  test("prefix entries match by prefix and exact entries only exactly, query string removed", () => {
    const { host, truth } = watched();
    const vm = host.createVm({
      configuration: JSON.stringify({ exclude_paths: ["/a*", "/b"], heartbeat_ms: 0 }),
    });
    const cases: [string, boolean][] = [
      ["/a", true],
      ["/abc", true],
      ["/a/b?c", true],
      ["/b", true],
      ["/b?x", true],
      ["/bc", false],
      ["/", false],
      ["/c/a", false],
      ["/B", false],
      ["/?/a", false],
    ];
    const ids = cases.map(([path, excluded]) => {
      const id = truth.run(vm, 1, () => vm.createStream());
      truth.run(vm, excluded ? -1 : 0, () => vm.requestHeaders(id, { ":path": path }));
      return { id, excluded };
    });
    expect(host.metric(GAUGE)).toBe(5);
    for (const { id, excluded } of ids) truth.run(vm, excluded ? 0 : -1, () => vm.endStream(id));
    vm.tick();
    expect(host.metric(TOTAL)).toBe(5);
  });

  test("a network-filter connection is in flight from creation to deletion, in the gauge its plugin names", () => {
    const TCP = gaugeName(0, "lastcall_inflight_tcp");
    const { host, truth } = watched(TCP);
    const tcp = host.createVm({
      vmId: "lastcall_inflight_tcp",
      configuration: '{"heartbeat_ms":0,"gauge":"lastcall_inflight_tcp"}',
    });
    const http = host.createVm({ configuration: PLAIN });
    const connection = truth.run(tcp, 1, () => tcp.createStream());
    expect(truth.run(tcp, 0, () => tcp.newConnection(connection))).toBe(0);
    const stream = http.createStream();
    expect([host.metric(TCP), host.metric(GAUGE)]).toEqual([1, 1]); // the agent's setup: one gauge per variant
    truth.run(tcp, 0, () => tcp.downstreamClose(connection));
    expect(host.metric(TCP)).toBe(1);
    truth.run(tcp, -1, () => tcp.endStream(connection));
    expect([host.metric(TCP), host.metric(GAUGE)]).toEqual([0, 1]);
    http.endStream(stream);
    tcp.tick();
    expect(host.metric(TOTAL)).toBe(1);
  });

  test("stats are per name, not per vm_id: two variants without their own gauge count in one", () => {
    const { host, truth } = watched();
    const tcp = host.createVm({ vmId: "lastcall_inflight_tcp", configuration: PLAIN });
    const http = host.createVm({ configuration: PLAIN });
    const connection = truth.run(tcp, 1, () => tcp.createStream());
    const stream = truth.run(http, 1, () => http.createStream());
    expect(host.metric(GAUGE)).toBe(2);
    truth.run(tcp, -1, () => tcp.endStream(connection));
    truth.run(http, -1, () => http.endStream(stream));
    expect(host.metric(GAUGE)).toBe(0);
  });

  test.each([
    [0, undefined, "lastcall_inflight"],
    [1, undefined, "lastcall_inflight_odd"],
    [2, undefined, "lastcall_inflight"],
    [7, undefined, "lastcall_inflight_odd"],
    [0, "lastcall_inflight_tcp", "lastcall_inflight_tcp"],
    [3, "x_9", "x_9_odd"],
  ])("restart epoch %i with gauge %s counts in wasmcustom.%s only", (epoch, gauge, name) => {
    const { host, truth } = watched(`wasmcustom.${name}`);
    const configuration = (extra: object) =>
      JSON.stringify({ epoch, ...(gauge ? { gauge } : {}), ...extra });
    const vms = [
      host.createVm({ configuration: configuration({ heartbeat_ms: 0 }) }),
      host.createVm({ configuration: configuration({}) }),
    ];
    const ids = vms.map((vm) => truth.run(vm, 1, () => vm.createStream()));
    expect(host.metric(`wasmcustom.${name}`)).toBe(2);
    const others = [0, 1].flatMap((
      parity,
    ) => [gaugeName(parity), gaugeName(parity, gauge ?? "lastcall_inflight")]);
    for (const other of others) {
      if (other !== `wasmcustom.${name}`) expect(host.metric(other), other).toBeUndefined(); // never even defined
    }
    vms[1]!.tick();
    expect(JSON.parse(host.calls[0]!.body)).toMatchObject({ epoch, inflight: 2 });
    vms.forEach((vm, i) => truth.run(vm, -1, () => vm.endStream(ids[i]!)));
    expect(host.metric(`wasmcustom.${name}`)).toBe(0);
  });
});

describe("the cost of a stream outside a drain", () => {
  test("a request makes exactly two host calls: +1 on the gauge at creation, −1 at deletion", () => {
    const host = new ProxyWasmHost();
    const vms = [host.createVm(), host.createVm({ configuration: PLAIN })]; // heartbeats on and off
    const other = vms[1]!.createStream(); // another VM's stream in flight: nothing changes
    vms[0]!.tick();
    host.calls[0]!.respond(200, "", [["x-lastcall-draining", "0"]]); // heard from the agent: not draining
    const imports: string[] = [];
    const points: string[] = [];
    host.onImport = (_, name) => {
      imports.push(name);
    };
    host.afterHostCall = ({ call, key, callback, offset }) => {
      points.push(`${callback}: ${call} ${key} ${offset}`);
    };
    for (const vm of vms) {
      const id = vm.createStream();
      vm.requestHeaders(id, { ":path": "/api", ":method": "GET", ":authority": "app" });
      vm.responseHeaders(id);
      vm.endStream(id);
    }
    expect(imports).toEqual(Array(4).fill("proxy_increment_metric"));
    expect(points).toEqual(
      Array(2).fill([
        `proxy_on_context_create: proxy_increment_metric ${GAUGE} 1`,
        `proxy_on_delete: proxy_increment_metric ${GAUGE} -1`,
      ]).flat(),
    );
    expect(host.calls).toHaveLength(1);
    vms[1]!.endStream(other);
  });

  test("with exclude_paths, a request adds one read of :path, no other host call", () => {
    const host = new ProxyWasmHost();
    const vm = host.createVm({ configuration: EXCLUDING });
    const imports: string[] = [];
    host.onImport = (_, name) => {
      imports.push(name);
    };
    const id = vm.createStream();
    vm.requestHeaders(id, { ":path": "/api" });
    vm.endStream(id);
    expect(imports).toEqual([
      "proxy_increment_metric",
      "proxy_get_header_map_value",
      "proxy_increment_metric",
    ]);
  });

  test("the module imports only proxy-wasm ABI functions, and no shared data", () => {
    const imports = new ProxyWasmHost().imports();
    expect(imports.filter((name) => !/^env\.proxy_[a-z_]+$/.test(name))).toEqual([]);
    expect(imports.sort()).toEqual([
      "env.proxy_define_metric",
      "env.proxy_get_buffer_bytes",
      "env.proxy_get_header_map_value",
      "env.proxy_get_metric",
      "env.proxy_get_property",
      "env.proxy_http_call",
      "env.proxy_increment_metric",
      "env.proxy_log",
      "env.proxy_set_effective_context",
      "env.proxy_set_tick_period_milliseconds",
    ]);
  });

  // Direct evidence of "no allocation, no map entry": the VM's whole linear memory (heap, maps,
  // allocator state) is byte for byte what it was after a stream, and differs during it in one
  // aligned word only, holding the stream's id (its slot in the live table, live.ts). The same
  // probe sees the map entry a VM with exclude_paths makes, so it is not blind.
  test("with exclude_paths empty a stream changes one word of the VM's memory (its id, in its slot) while it lives, nothing after, and 100,000 streams do not grow it", () => {
    const host = new ProxyWasmHost();
    const plain = host.createVm({ configuration: PLAIN });
    const excluding = host.createVm({ configuration: EXCLUDING });
    // The aligned u32 words that differ from `before`, as their values now.
    const changedWords = (before: Uint8Array, now: Uint8Array) => {
      if (now.length !== before.length) return ["memory grew"];
      const words: number[] = [];
      for (let i = 0; i < now.length; i += 4) {
        if (
          now[i] !== before[i] || now[i + 1] !== before[i + 1] || now[i + 2] !== before[i + 2] ||
          now[i + 3] !== before[i + 3]
        ) {
          words.push(new DataView(now.buffer, i, 4).getUint32(0, true));
        }
      }
      return words;
    };
    const request = (vm: FilterVm, before: Uint8Array) => {
      const id = vm.createStream();
      vm.requestHeaders(id, { ":path": "/api", ":method": "GET" });
      const during = changedWords(before, vm.memorySnapshot());
      vm.responseHeaders(id);
      vm.endStream(id);
      return { id, during, after: changedWords(before, vm.memorySnapshot()) };
    };
    for (const vm of [plain, excluding]) {
      for (let i = 0; i < 1000; i++) vm.requestHeaders(vm.createStream(), { ":path": "/live" }); // a busy worker
      request(vm, vm.memorySnapshot()); // one request first: any state made once, on first use, is made now
    }
    const seen = request(plain, plain.memorySnapshot());
    expect(seen).toEqual({ id: seen.id, during: [seen.id], after: [] });
    expect(request(excluding, excluding.memorySnapshot()).during.length).toBeGreaterThan(1);
    const size = plain.memorySize;
    const before = plain.memorySnapshot();
    for (let i = 0; i < 100_000; i++) {
      const id = plain.createStream();
      plain.requestHeaders(id, { ":path": "/api" });
      plain.endStream(id);
    }
    expect(plain.memorySize).toBe(size);
    expect(plain.memorySnapshot()).toEqual(before);
    expect(host.metric(GAUGE)).toBe(2000);
  });
});
