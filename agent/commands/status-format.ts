// What `lastcall status` prints: the answer of `GET /v1/state` as a few short lines for people; a
// pure function that never throws.

/** The widest a printed line should be: a long path is cut to fit. */
export const STATUS_WIDTH = 100;

/** The widest a listener name is shown (Istio's `outbound|8080||svc.ns.svc.cluster.local` are long). */
const LISTENER_WIDTH = 32;

/** Options of {@linkcode formatStatus}. */
export interface FormatOptions {
  /** The answer of `/healthz/ready` (`{ready, reason}`), when it was asked. */
  readiness?: unknown;
  /** The time now (ms since the epoch), for ages the state gives as moments; left out, they are not shown. */
  now?: number;
  /** Lines longer than this have their request path cut. @default 100 */
  width?: number;
}

type Fields = Record<string, unknown>;

/** `value` as an object of fields, or undefined. */
function fields(value: unknown): Fields | undefined {
  return typeof value === "object" && value !== null && !Array.isArray(value)
    ? value as Fields
    : undefined;
}

/** A field of an object's own (a key named `constructor` or `__proto__` finds nothing inherited). */
function field(from: Fields | undefined, key: string): unknown {
  return from !== undefined && Object.hasOwn(from, key) ? from[key] : undefined;
}

function num(from: Fields | undefined, key: string): number | undefined {
  const value = field(from, key);
  return typeof value === "number" && Number.isFinite(value) ? value : undefined;
}

function str(from: Fields | undefined, key: string): string | undefined {
  const value = field(from, key);
  return typeof value === "string" ? printable(value) : undefined;
}

function list(from: Fields | undefined, key: string): unknown[] {
  const value = field(from, key);
  return Array.isArray(value) ? value : [];
}

/** Control characters, and Unicode's invisible direction and line marks. */
// deno-lint-ignore no-control-regex -- matching control characters is the point
const HIDDEN = /[\u0000-\u001f\u007f-\u009f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

/**
 * Text safe to print on a terminal: control characters (C0, DEL and C1, which a request path can
 * carry, as the filter escapes them) are shown as `\xNN`, and the invisible direction and line
 * marks of Unicode as `\uNNNN` (they could make a path read as another), never sent as they are.
 *
 * @example
 * ```ts
 * printable("/a\u001b[2Jb"); // "/a\\x1b[2Jb"
 * ```
 */
export function printable(text: string): string {
  return text.replace(HIDDEN, (c) => {
    const code = c.charCodeAt(0);
    return code <= 0xff ? `\\x${code.toString(16).padStart(2, "0")}` : `\\u${code.toString(16)}`;
  });
}

/**
 * A duration the way operators read it: `340 ms` under a second, `12.3 s` under a minute, then
 * `2 m 5 s`, and `1 h 2 m` from an hour on; `?` for anything that is not a duration.
 *
 * @example
 * ```ts
 * formatAge(12_345); // "12.3 s"
 * ```
 */
export function formatAge(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return "?";
  if (Math.round(ms) < 1000) return `${Math.round(ms)} ms`;
  const tenths = Math.round(ms / 100);
  if (tenths < 600) return `${(tenths / 10).toFixed(1)} s`;
  const seconds = Math.round(ms / 1000);
  if (seconds < 3600) return `${Math.floor(seconds / 60)} m ${seconds % 60} s`;
  const minutes = Math.round(ms / 60_000);
  return `${Math.floor(minutes / 60)} h ${minutes % 60} m`;
}

/** `1 restart`, `0 restarts`. */
function count(n: number, what: string): string {
  return `${n} ${what}${n === 1 ? "" : "s"}`;
}

/** `epoch 1 (pid 1234)` of an Envoy of the state. */
function envoyName(envoy: Fields | undefined): string | undefined {
  const epoch = num(envoy, "epoch");
  const pid = num(envoy, "pid");
  if (epoch === undefined && pid === undefined) return undefined;
  return [
    epoch !== undefined ? `epoch ${epoch}` : "epoch ?",
    pid !== undefined ? `(pid ${pid})` : "",
  ].filter(Boolean).join(" ");
}

/** Cuts `text` to `room` columns, marking the cut with `…`. */
function cut(text: string, room: number): string {
  if (text.length <= room) return text;
  return room <= 1 ? "…" : `${text.slice(0, room - 1)}…`;
}

/** Milliseconds between two ISO moments, when both parse. */
function between(from: string | undefined, to: string | undefined): number | undefined {
  const a = from === undefined ? NaN : Date.parse(from);
  const b = to === undefined ? NaN : Date.parse(to);
  return Number.isFinite(a) && Number.isFinite(b) ? b - a : undefined;
}

/** The first line: what lastcall is doing. */
function headline(state: Fields, drain: Fields | undefined, o: FormatOptions): string {
  const phase = str(state, "phase") ?? "phase unknown";
  if (drain) {
    const source = str(drain, "source");
    const parts = [`lastcall: ${phase}${source ? ` (${source})` : ""}`];
    // From the server's own clock when it can be (the deadline is still ahead), else from ours.
    const startedAt = str(drain, "started_at");
    const left = num(drain, "deadline_in_ms");
    const span = between(startedAt, str(drain, "deadline_at"));
    const since = startedAt === undefined ? NaN : Date.parse(startedAt);
    const elapsed = span !== undefined && left !== undefined && left > 0
      ? span - left
      : o.now !== undefined && Number.isFinite(since)
      ? o.now - since
      : undefined;
    if (elapsed !== undefined) parts[0] += ` for ${formatAge(Math.max(0, elapsed))}`;
    const ended = fields(field(drain, "wait_ended"));
    const endedAfter = num(ended, "after_ms");
    if (ended) {
      // A drain in place whose wait is over: Envoy serves on, no deadline counts down.
      const after = endedAfter === undefined ? "" : ` after ${formatAge(endedAfter)}`;
      parts.push(`wait ended${after} (${str(ended, "reason") ?? "reason unknown"})`);
    } else if (left !== undefined) {
      parts.push(left > 0 ? `deadline in ${formatAge(left)}` : "deadline passed");
    }
    const mode = str(drain, "mode");
    if (mode) parts.push(`mode ${mode}`);
    return parts.join(", ");
  }
  const readiness = fields(o.readiness);
  const ready = field(readiness, "ready");
  if (typeof ready !== "boolean") return `lastcall: ${phase}`;
  if (ready) return `lastcall: ${phase}, ready`;
  const reason = str(readiness, "reason");
  return `lastcall: ${phase}, not ready${reason && reason !== phase ? `: ${reason}` : ""}`;
}

/** The Envoy lines: which runs, which serves, restarts, and any other that still lives. */
function envoyLines(state: Fields, o: FormatOptions): string[] {
  const current = fields(field(state, "current"));
  const serving = fields(field(state, "serving"));
  const currentName = envoyName(current);
  let line = currentName ? `envoy: ${currentName}` : "envoy: not running";
  if (currentName) {
    const servingEpoch = num(serving, "epoch");
    line += servingEpoch !== undefined ? `, serving epoch ${servingEpoch}` : ", none serving yet";
  }
  const tallies: string[] = [];
  const restarts = num(state, "restarts");
  const hot = num(state, "hotRestarts");
  const rejected = num(state, "reloadsRejected");
  if (restarts !== undefined) tallies.push(count(restarts, "restart"));
  if (hot !== undefined) tallies.push(count(hot, "hot restart"));
  if (rejected) tallies.push(count(rejected, "reload") + " rejected");
  if (tallies.length) line += `; ${tallies.join(", ")}`;
  const lines = [line];
  const others = list(state, "epochs").map(fields).filter((e) => e && envoyName(e) !== currentName)
    .map(envoyName).filter(Boolean);
  if (others.length) lines.push(`  also running: ${others.join(", ")}`);
  const since = num(state, "unresponsiveSince");
  if (since !== undefined) {
    lines.push(
      `  admin not answering${
        o.now !== undefined ? ` for ${formatAge(Math.max(0, o.now - since))}` : ""
      }`,
    );
  }
  const lastExit = str(state, "lastExitReason");
  if (lastExit) lines.push(`  last exit: ${lastExit}`);
  return lines;
}

/** `in flight: 3 (inbound 2, outbound 1)`, and the filter's state when it is not reporting. */
function inflightLine(state: Fields, drain: Fields | undefined): string {
  const inflight = num(drain, "inflight") ?? num(state, "inflight");
  let line = `in flight: ${inflight ?? "?"}`;
  const byListener = Object.entries(fields(field(drain, "by_listener")) ?? {})
    .filter(([, n]) => typeof n === "number" && Number.isFinite(n))
    .map(([name, n]) => `${printable(name)} ${n}`);
  if (byListener.length) line += ` (${byListener.join(", ")})`;
  const filter = str(state, "filter");
  if (filter !== undefined && filter !== "reporting") line += `; filter ${filter}`;
  return line;
}

/**
 * What a holder was asked: `GET /slow`; without them (Envoy 1.40 keeps a request's headers from
 * the filter after their callback) where it went: `HTTP/1.1 to app (route r1)`.
 */
function request(holder: Fields): string {
  const text = [str(holder, "method"), str(holder, "path")].filter((s) =>
    s !== undefined && s !== ""
  ).join(" ");
  if (text) return text;
  const cluster = str(holder, "cluster");
  const route = str(holder, "route");
  const where = [str(holder, "protocol"), cluster && `to ${cluster}`, route && `(route ${route})`]
    .filter((s) => s).join(" ");
  return where || "(method and path not known)";
}

/** The lines of a drain: what it waits for, oldest first, and the apps that still run. */
function drainLines(drain: Fields, width: number): string[] {
  const holders = list(drain, "holders").map(fields).filter((h): h is Fields => h !== undefined);
  const unnamed = num(drain, "unnamed");
  const lines: string[] = [];
  if (holders.length) {
    const epochs = new Set(holders.map((h) => num(h, "epoch")));
    const rows = holders.map((h) => {
      const age = num(h, "age_ms");
      const epoch = num(h, "epoch");
      return {
        age: age === undefined ? "?" : formatAge(age),
        epoch: epochs.size > 1 ? `epoch ${epoch ?? "?"}` : undefined,
        listener: cut(str(h, "listener") ?? str(h, "address") ?? "(unknown)", LISTENER_WIDTH),
        request: request(h),
      };
    });
    const ageWidth = Math.max(...rows.map((r) => r.age.length));
    const epochWidth = Math.max(...rows.map((r) => r.epoch?.length ?? 0));
    const listenerWidth = Math.max(...rows.map((r) => r.listener.length));
    lines.push("waiting for, oldest first:");
    for (const r of rows) {
      const head = [
        `   ${r.age.padStart(ageWidth)}`,
        r.epoch?.padEnd(epochWidth),
        r.listener.padEnd(listenerWidth),
      ]
        .filter((s) => s !== undefined).join("  ");
      lines.push(`${head}  ${cut(r.request, Math.max(8, width - head.length - 2))}`);
    }
    if (unnamed !== 0) lines.push(`  + ${unnamed ?? "?"} not named`);
  } else if (unnamed) {
    lines.push(`waiting for: ${unnamed} not named yet`);
  }
  const apps = list(drain, "apps").map(fields).filter((a): a is Fields => a !== undefined)
    .map((a) => {
      const pid = num(a, "pid");
      return `${str(a, "id") ?? "(unnamed app)"}${pid !== undefined ? ` (pid ${pid})` : ""}`;
    });
  if (apps.length) lines.push(`apps still running: ${apps.join(", ")}`);
  const unsent = num(drain, "unsent_bytes");
  if (unsent) lines.push(`still to send to clients: ${count(unsent, "byte")}`);
  return lines;
}

/** How the last termination went, when there was one. */
function terminationLine(state: Fields): string | undefined {
  const t = fields(field(state, "termination"));
  if (!t) return undefined;
  const drainMs = num(t, "drainMs");
  const mode = str(t, "mode");
  const atStop = num(t, "inflightAtStop");
  const parts = [
    `termination: ${str(t, "reason") ?? "?"}${
      drainMs !== undefined ? ` after ${formatAge(drainMs)}` : ""
    }`,
  ];
  if (mode) parts.push(`mode ${mode}`);
  if (atStop !== undefined) parts.push(`${atStop} in flight at stop`);
  return parts.join(", ");
}

/**
 * Formats the answer of `GET /v1/state` for people, one string per line. Never throws: fields
 * missing or of another type are left out (or shown as `?`), unknown ones are ignored, and a
 * value that is not an object gives one line saying so.
 *
 * @param state The parsed body of `/v1/state`
 * @param options The readiness answer, the time now, the width
 * @returns The lines, without line ends
 * @example
 * ```ts
 * formatStatus({ phase: "running", current: { epoch: 0, pid: 12 }, serving: { epoch: 0, pid: 12 }, restarts: 0, hotRestarts: 0, inflight: 0, filter: "reporting" },
 *   { readiness: { ready: true, reason: "LIVE" } });
 * // ["lastcall: running, ready", "envoy: epoch 0 (pid 12), serving epoch 0; 0 restarts, 0 hot restarts", "in flight: 0"]
 * ```
 */
export function formatStatus(state: unknown, options: FormatOptions = {}): string[] {
  const s = fields(state);
  if (!s) {
    return [
      `lastcall: answered ${
        Array.isArray(state) ? "a list" : state === null ? "null" : typeof state
      }, not a state`,
    ];
  }
  const drain = fields(field(s, "drain"));
  const lines = [headline(s, drain, options), ...envoyLines(s, options), inflightLine(s, drain)];
  if (drain) lines.push(...drainLines(drain, options.width ?? STATUS_WIDTH));
  const termination = terminationLine(s);
  if (termination) lines.push(termination);
  return lines;
}
