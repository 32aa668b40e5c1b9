// What holds a drain: the oldest live streams each filter VM names while a drain waits
// (docs/architecture.md, docs/filter-protocol.md "Holders").

/** One live stream a VM named: what Envoy knows of it (a field Envoy does not have is absent). */
export interface Holder {
  /** The stream's context id in its VM (ids grow: smaller is older). */
  id: number;
  /** When the request began (Envoy's `request.time`), ms since the epoch. */
  startMs?: number;
  method?: string;
  /** The path without its query string (at most 256 bytes, as the filter cut it). */
  path?: string;
  /** The local address the client reached: the listener's, `ip:port`. */
  address?: string;
  /** `HTTP/1.1`, `HTTP/2`, ... */
  protocol?: string;
  /** The upstream cluster its route chose. */
  cluster?: string;
  /** Its route's name, when the route has one. */
  route?: string;
}

/** The text fields of a holder, as the filter names them. */
const TEXT_FIELDS = ["method", "path", "address", "protocol", "cluster", "route"] as const;

/** The holders part of a report (reason `holders`). */
export interface HoldersReport {
  /** The VM's own count of its live streams: a holder the VM could not name still counts here. */
  vmInflight: number;
  holders: Holder[];
}

/** Most holders a VM is asked for (and a report may carry). */
export const MAX_HOLDERS = 32;

/** How old a VM's holders may be before the next of its reports asks again. */
export const HOLDERS_REFRESH_MS = 1000;

/** A VM not heard from for this long is left out (it went with a hot-restart parent, or is stuck). */
const HOLDERS_FORGET_MS = 5000;

const MAX_TEXT = 512;

/**
 * Parses the `vm` and `holders` fields of a report body; throws naming the bad field.
 *
 * @example
 * ```ts
 * parseHolders({ vm_inflight: 1, holders: [{ id: 7, start_ns: 1.7e18, method: "GET", path: "/x" }] });
 * // { vmInflight: 1, holders: [{ id: 7, startMs: 1.7e12, method: "GET", path: "/x" }] }
 * ```
 */
export function parseHolders(body: Record<string, unknown>): HoldersReport | undefined {
  if (body.holders === undefined) return undefined;
  if (!Array.isArray(body.holders) || body.holders.length > MAX_HOLDERS) {
    throw new TypeError(
      `Report field holders is not a list of at most ${MAX_HOLDERS}: ${
        JSON.stringify(body.holders)?.slice(0, 40)
      }`,
    );
  }
  const vmInflight = body.vm_inflight;
  if (typeof vmInflight !== "number" || !Number.isSafeInteger(vmInflight) || vmInflight < 0) {
    throw new TypeError(
      `Report field vm_inflight is not a count: ${JSON.stringify(vmInflight)?.slice(0, 40)}`,
    );
  }
  return { vmInflight, holders: body.holders.map(parseHolder) };
}

function parseHolder(value: unknown): Holder {
  const h = (typeof value === "object" && value !== null ? value : {}) as Record<string, unknown>;
  if (typeof h.id !== "number" || !Number.isSafeInteger(h.id) || h.id < 0) {
    throw new TypeError(
      `Report holder id is not a context id: ${JSON.stringify(value)?.slice(0, 60)}`,
    );
  }
  const holder: Holder = { id: h.id };
  // Nanoseconds past 2^53 lose their last bits as a JSON number: milliseconds are all that is used.
  if (typeof h.start_ns === "number" && Number.isFinite(h.start_ns) && h.start_ns > 0) {
    holder.startMs = Math.floor(h.start_ns / 1e6);
  }
  for (const key of TEXT_FIELDS) {
    if (typeof h[key] === "string") holder[key] = fromBytes((h[key] as string).slice(0, MAX_TEXT));
  }
  return holder;
}

const utf8 = new TextDecoder();

// The filter writes each byte of Envoy's value as one character (bytes past ASCII as \u00XX):
// read back as UTF-8 (what a path is), a byte that is not UTF-8 becomes U+FFFD.
function fromBytes(text: string): string {
  const codes = Array.from(text, (c) => c.charCodeAt(0));
  if (!codes.some((c) => c >= 0x80) || codes.some((c) => c > 0xff)) return text;
  return utf8.decode(Uint8Array.from(codes));
}

/** A holder as shown: which Envoy, which listener, how old. */
export interface HolderView {
  epoch: number;
  /** The listener's name when Envoy's admin told it, else its address. */
  listener: string;
  address?: string;
  method?: string;
  path?: string;
  protocol?: string;
  cluster?: string;
  route?: string;
  /** How long the request has been in flight, when Envoy said when it began. */
  age_ms?: number;
}

/** Everything known of what holds a drain now. */
export interface HoldersNow {
  /** Oldest first (those of unknown age last). */
  holders: HolderView[];
  /** Streams counted by the VMs heard from but not named (more than a VM was asked for, or untracked). */
  unnamed: number;
  /** Named and unnamed streams by listener (unnamed ones under `"(unnamed)"`). */
  byListener: Record<string, number>;
}

interface Entry extends HoldersReport {
  epoch: number;
  at: number;
}

/** Options of {@linkcode HolderBook}. */
export interface HolderBookOptions {
  /** Clock, replaceable in tests. @default Date.now */
  now?: () => number;
}

/**
 * The latest holders of each worker VM of each Envoy process.
 *
 * @example
 * ```ts
 * const book = new HolderBook();
 * if (book.wants("a", "1700000000000000001")) answer.holders = MAX_HOLDERS; // then, from the VM:
 * book.record("a", 0, "1700000000000000001", { vmInflight: 1, holders: [{ id: 7, path: "/x" }] });
 * book.now(["a"], () => "inbound"); // { holders: [{ epoch: 0, listener: "inbound", path: "/x" }], unnamed: 0, ... }
 * ```
 */
export class HolderBook {
  readonly #now: () => number;
  readonly #entries = new Map<string, Map<string, Entry>>();
  readonly #asked = new Map<string, number>();

  constructor(options: HolderBookOptions = {}) {
    this.#now = options.now ?? Date.now;
  }

  /** Whether the next answer to VM `vm` of `instance` should ask for its holders (and notes that it does). */
  wants(instance: string, vm: string): boolean {
    const key = `${instance}\n${vm}`;
    const now = this.#now();
    const entry = this.#entries.get(instance)?.get(vm);
    if (entry && now - entry.at < HOLDERS_REFRESH_MS) return false;
    if (now - (this.#asked.get(key) ?? -Infinity) < HOLDERS_REFRESH_MS) return false;
    this.#asked.set(key, now);
    return true;
  }

  /** Keeps the holders VM `vm` of `instance` just named, in place of its earlier ones. */
  record(instance: string, epoch: number, vm: string, report: HoldersReport): void {
    const vms = this.#entries.get(instance) ?? new Map<string, Entry>();
    this.#entries.set(instance, vms);
    vms.set(vm, { ...report, epoch, at: this.#now() });
  }

  /** Forgets an Envoy process that exited. */
  forget(instance: string): void {
    this.#entries.delete(instance);
    for (const key of [...this.#asked.keys()]) {
      if (key.startsWith(`${instance}\n`)) this.#asked.delete(key);
    }
  }

  /**
   * The holders of `instances` now: those of processes whose count is not zero, from VMs heard
   * from lately, oldest first.
   *
   * @param listenerOf Names the listener of an address (undefined: the address is shown)
   * @param counted The latest count of an instance; a process at zero holds nothing
   */
  now(
    instances: Iterable<string>,
    listenerOf: (instance: string, address: string) => string | undefined,
    counted: (instance: string) => number,
  ): HoldersNow {
    const now = this.#now();
    const holders: HolderView[] = [];
    let unnamed = 0;
    for (const instance of instances) {
      if (counted(instance) === 0) continue;
      for (const entry of this.#entries.get(instance)?.values() ?? []) {
        if (now - entry.at > HOLDERS_FORGET_MS) continue;
        unnamed += Math.max(0, entry.vmInflight - entry.holders.length);
        for (const h of entry.holders) {
          const view: HolderView = {
            epoch: entry.epoch,
            listener: h.address ? listenerOf(instance, h.address) ?? h.address : "(unknown)",
          };
          for (const key of TEXT_FIELDS) if (h[key] !== undefined) view[key] = h[key];
          if (h.startMs !== undefined) view.age_ms = Math.max(0, now - h.startMs);
          holders.push(view);
        }
      }
    }
    holders.sort((a, b) => (b.age_ms ?? -1) - (a.age_ms ?? -1));
    const byListener: Record<string, number> = {};
    for (const h of holders) byListener[h.listener] = (byListener[h.listener] ?? 0) + 1;
    if (unnamed > 0) byListener["(unnamed)"] = unnamed;
    return { holders, unnamed, byListener };
  }
}
