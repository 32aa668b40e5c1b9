// Named races of two worker VMs on the one process-wide gauge: what each pushes after its own
// move while the other moves in between. Envoy's workers hold no lock between two host calls, so
// any other worker may run there; the in-process host plays that by running other VMs inside
// `beforeHostCall` (see test/support/proxy-wasm-host.ts). races.test.ts has the random ones.
import { describe, expect, test } from "vitest";
import { type FilterVm, ProxyWasmHost } from "../support/proxy-wasm-host.ts";
import { body } from "./reports-host.ts";

const DRAINING: [string, string][] = [["x-lastcall-draining", "1"]];

/** Two VMs that both know of the drain, with a stream each: the count is 2. */
function twoDraining() {
  const host = new ProxyWasmHost();
  const [a, b] = [host.createVm(), host.createVm()];
  for (const vm of [a, b]) {
    vm.tick();
    host.calls.at(-1)!.respond(200, "", DRAINING);
  }
  const from = host.calls.length;
  const pushes = () =>
    host.calls.slice(from).map((call) =>
      `${call.vm.index} ${body(call).reason} ${body(call).inflight}`
    );
  return { host, a, b, pushes };
}

/** Runs `race` once, when `vm` is about to read the gauge in `callback`. */
function beforeRead(
  host: ProxyWasmHost,
  vm: FilterVm,
  callback: string,
  race: () => void,
): () => boolean {
  let raced = false;
  host.beforeHostCall = (point) => {
    if (
      raced || point.vm !== vm || point.call !== "proxy_get_metric" || point.callback !== callback
    ) return;
    raced = true;
    race();
  };
  return () => raced;
}

describe("pushes are what a VM reads right after its own move", () => {
  test("two VMs ending their streams at once may both push zero, each read after its own move", () => {
    const { host, a, b, pushes } = twoDraining();
    const [sa, sb] = [a.createStream(), b.createStream()];
    expect(pushes()).toEqual(["0 busy 1"]);
    const raced = beforeRead(host, a, "proxy_on_delete", () => b.endStream(sb)); // 2 → 1 by a, then 1 → 0 by b
    a.endStream(sa);
    expect(raced()).toBe(true);
    expect(pushes()).toEqual(["0 busy 1", "1 zero 0", "0 zero 0"]);
  });

  test("a move back from zero before the read: no zero, the other VM's busy says it", () => {
    const { host, a, b, pushes } = twoDraining();
    const sa = a.createStream();
    const raced = beforeRead(host, a, "proxy_on_delete", () => b.createStream()); // 1 → 0 by a, then 0 → 1 by b
    a.endStream(sa);
    expect(raced()).toBe(true);
    expect(pushes()).toEqual(["0 busy 1", "1 busy 1"]);
  });

  test("a push says what the VM read after its move, not which move it was: a 1 → 2 read as 1 is a busy", () => {
    const { host, a, b, pushes } = twoDraining();
    const sb = b.createStream();
    const raced = beforeRead(host, a, "proxy_on_context_create", () => b.endStream(sb)); // 1 → 2 by a, then 2 → 1 by b
    a.createStream();
    expect(raced()).toBe(true);
    expect(pushes()).toEqual(["1 busy 1", "0 busy 1"]); // b read 1 after its −1: no zero
  });
});
