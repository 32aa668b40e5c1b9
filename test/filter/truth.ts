// The true in-flight count of an in-process "Envoy", and the check that the filter's gauge equals
// it after every host call.
import type { FilterVm, HostCallPoint, ProxyWasmHost } from "../support/proxy-wasm-host.ts";

/** The gauge's Envoy name for a restart epoch and the plugin's `gauge` key: one name per epoch parity. */
export function gaugeName(epoch = 0, base = "lastcall_inflight"): string {
  return `wasmcustom.${base}${epoch % 2 === 0 ? "" : "_odd"}`;
}

/** One callback the test drives, and the move it expects of it. */
export interface Op {
  /** The VM running it. */
  readonly vm: FilterVm;
  /** How it must move the count. */
  readonly delta: -1 | 0 | 1;
  /** Whether the filter made the move yet. */
  moved: boolean;
}

/** Plain check, its message built only on failure: it runs at every host call. */
export function check(condition: boolean, message: () => string): void {
  if (!condition) throw new Error(message());
}

/**
 * The true count and the callbacks in progress (at most one per VM; several VMs when a test runs
 * other VMs between two host calls of one).
 *
 * @example
 * ```ts
 * const truth = new Truth(host, gaugeName(0));
 * host.afterHostCall = (point) => truth.observe(point);
 * const id = truth.run(vm, 1, () => vm.createStream());
 * truth.run(vm, -1, () => vm.endStream(id));
 * ```
 */
export class Truth {
  /** Moves of finished callbacks. */
  committed = 0;
  /** Host calls checked so far. */
  checks = 0;
  readonly #host: ProxyWasmHost;
  readonly #gauge: string;
  readonly #ops = new Map<FilterVm, Op>();

  /** @param host the process @param gauge the gauge's Envoy name ({@linkcode gaugeName}) */
  constructor(host: ProxyWasmHost, gauge = gaugeName()) {
    this.#host = host;
    this.#gauge = gauge;
  }

  /** The true count now: finished callbacks' moves and the moves made so far by those in progress. */
  now(): number {
    let count = this.committed;
    for (const op of this.#ops.values()) if (op.moved) count += op.delta;
    return count;
  }

  /** The gauge as the host holds it (signed: a wrap below 0 shows as negative). */
  gauge(): number {
    return this.#host.metric(this.#gauge) ?? 0;
  }

  /** The callback `vm` is running for the test, if any. */
  op(vm: FilterVm): Op | undefined {
    return this.#ops.get(vm);
  }

  /** Runs one callback of `vm` that must move the count by `delta`; checks it did, once. */
  run<T>(vm: FilterVm, delta: -1 | 0 | 1, callback: () => T): T {
    check(!this.#ops.has(vm), () => `VM ${vm.index} already runs a callback`);
    const op: Op = { vm, delta, moved: false };
    this.#ops.set(vm, op);
    try {
      const result = callback();
      check(
        op.moved === (delta !== 0),
        () =>
          `VM ${vm.index}: a callback that must move the count by ${delta} did ${
            op.moved ? "" : "not "
          }move it`,
      );
      return result;
    } finally {
      this.#ops.delete(vm);
      if (op.moved) this.committed += delta;
    }
  }

  /** Checks one host call (call it from `afterHostCall`): the gauge is the true count, never below 0. */
  observe(point: HostCallPoint): void {
    if (point.call === "proxy_increment_metric" && point.key === this.#gauge) {
      const op = this.#ops.get(point.vm);
      check(
        op !== undefined && op.delta !== 0 && !op.moved && point.offset === BigInt(op.delta),
        () =>
          `VM ${point.vm.index} moved the gauge by ${point.offset} in ${point.callback}, expected ${
            op ? (op.moved ? "no second move" : op.delta) : "no move"
          }`,
      );
      op!.moved = true;
    }
    const gauge = this.gauge();
    const truth = this.now();
    check(
      gauge === truth && gauge >= 0,
      () =>
        `after ${point.call} ${point.key} of VM ${point.vm.index} in ${point.callback}: gauge ${gauge}, true count ${truth}`,
    );
    this.checks++;
  }
}
