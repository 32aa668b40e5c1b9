// The one client at a constant rate through a Kubernetes Service, for rollouts; every answer that
// is not a whole 200 is kept.
import { Agent, type IncomingMessage, request } from "node:http";

/** The kinds of request the client sends. */
export type RequestKind = "keep-alive" | "new-connection" | "long" | "slow-reader";
/** How a failed request failed. */
export type FailureClass = "refused" | "reset" | "5xx" | "truncated" | "timeout" | "other";

/** Options of {@linkcode startLoad}. */
export interface LoadOptions {
  /** The Service's base URL, e.g. http://10.246.128.7. */
  url: string;
  /** Requests per second on keep-alive connections. @default 20 */
  keepAlivePerSecond?: number;
  /** Requests per second, each on a new connection. @default 10 */
  newConnectionPerSecond?: number;
  /** One long request every this many ms. @default 500 */
  longEveryMs?: number;
  /** How long a long request takes at the app. @default 3000 */
  longMs?: number;
  /** One slow reader every this many ms; 0: none. @default 0 */
  slowEveryMs?: number;
  /** How many MB a slow reader reads. @default 4 */
  slowMb?: number;
  /** How fast a slow reader reads. @default 1_000_000 */
  slowBytesPerSecond?: number;
}

/** One request that did not get a complete 200. */
export interface FailedRequest {
  kind: RequestKind;
  class: FailureClass;
  /** ms since the load started: when it was sent and when it failed. */
  sent_ms: number;
  at_ms: number;
  error: string;
  /** The client's local port (to find the pod it reached in conntrack's table), when it had a socket. */
  local_port?: number;
  /** The pod it reached, when a caller found it (bench/lib/rollout-run.ts). */
  pod?: string;
}

/** What a load run saw. */
export interface LoadSummary {
  sent: number;
  /** Complete 200s. */
  ok: number;
  okByKind: Record<RequestKind, number>;
  sentByKind: Record<RequestKind, number>;
  failed: FailedRequest[];
  failedByClass: Record<FailureClass, number>;
  /** The longest time a complete answer took, in ms. */
  longestMs: number;
  /** When the load started (epoch ms): failures' times are relative to it. */
  startedAt: number;
}

/** A running load. */
export interface Load {
  /** Complete 200s so far. */
  readonly ok: number;
  /** Stops sending, waits for every answer, and resolves with the summary (the same one on every call). */
  stop(): Promise<LoadSummary>;
}

const KINDS: RequestKind[] = ["keep-alive", "new-connection", "long", "slow-reader"];
const CLASSES: FailureClass[] = ["refused", "reset", "5xx", "truncated", "timeout", "other"];

/**
 * Classes an error of node:http (or a status, or a short body).
 *
 * @example
 * classify({ code: "ECONNRESET", message: "read ECONNRESET" }); // "reset"
 */
export function classify(
  error: { code?: string; message: string } | undefined,
  status?: number,
  truncated = false,
): FailureClass {
  if (status !== undefined && status >= 500) return "5xx";
  if (truncated) return "truncated";
  const code = error?.code ?? "";
  if (code === "ECONNREFUSED" || code === "EHOSTUNREACH" || code === "ENETUNREACH") {
    return "refused";
  }
  if (code === "ECONNRESET" || code === "EPIPE" || /socket hang up/.test(error?.message ?? "")) {
    return "reset";
  }
  if (code === "ETIMEDOUT" || /no answer in time/.test(error?.message ?? "")) return "timeout";
  return "other";
}

/**
 * Starts sending at once; the timers keep the rate whatever the answers take.
 *
 * @example
 * const load = startLoad({ url: `http://${clusterIp}` });
 * await rollout();
 * expect((await load.stop()).failed).toEqual([]);
 */
export function startLoad(options: LoadOptions): Load {
  const keepAlive = new Agent({ keepAlive: true, maxSockets: 4 });
  const pending = new Set<Promise<void>>();
  const failed: FailedRequest[] = [];
  const okByKind = Object.fromEntries(KINDS.map((k) => [k, 0])) as Record<RequestKind, number>;
  const sentByKind = Object.fromEntries(KINDS.map((k) => [k, 0])) as Record<RequestKind, number>;
  const startedAt = Date.now();
  const longMs = options.longMs ?? 3000;
  const slowMb = options.slowMb ?? 4;
  const slowRate = options.slowBytesPerSecond ?? 1_000_000;
  let ok = 0;
  let longestMs = 0;

  const send = (kind: RequestKind) => {
    const path = kind === "long"
      ? `/slow?ms=${longMs}`
      : kind === "slow-reader"
      ? `/download?mb=${slowMb}`
      : "/";
    const expected = kind === "long"
      ? `hello from the demo app (/slow, after ${longMs} ms)\n`
      : "hello from the demo app (/)\n";
    const expectedBytes = kind === "slow-reader" ? slowMb * 1_000_000 : Buffer.byteLength(expected);
    const sent = Date.now();
    sentByKind[kind]++;
    const done = new Promise<void>((finish) => {
      let settled = false;
      let localPort: number | undefined;
      const fail = (cls: FailureClass, error: string) => {
        if (settled) return;
        settled = true;
        failed.push({
          kind,
          class: cls,
          sent_ms: sent - startedAt,
          at_ms: Date.now() - startedAt,
          error,
          ...(localPort ? { local_port: localPort } : {}),
        });
        finish();
      };
      const succeed = () => {
        if (settled) return;
        settled = true;
        ok++;
        okByKind[kind]++;
        longestMs = Math.max(longestMs, Date.now() - sent);
        finish();
      };
      const timeoutMs = kind === "slow-reader"
        ? (expectedBytes / slowRate) * 1000 + 30_000
        : longMs + 15_000;
      const req = request(
        `${options.url}${path}`,
        {
          agent: kind === "keep-alive" ? keepAlive : false,
          headers: kind === "keep-alive" ? {} : { connection: "close" },
        },
        (res) =>
          readBody(res, kind === "slow-reader" ? slowRate : 0).then(({ body, bytes, error }) => {
            const status = res.statusCode ?? 0;
            if (status !== 200) {
              return fail(
                classify(undefined, status),
                `status ${status}, body ${JSON.stringify(body.slice(0, 120))}`,
              );
            }
            const whole = kind === "slow-reader" ? bytes === expectedBytes : body === expected;
            if (error || !whole) {
              return fail(
                bytes < expectedBytes ? "truncated" : "other",
                `${error ? `${error.message}; ` : ""}${bytes} of ${expectedBytes} bytes`,
              );
            }
            succeed();
          }),
      );
      req.once("socket", (socket) => {
        if (socket.localPort) localPort = socket.localPort;
        else socket.once("connect", () => (localPort = socket.localPort));
      });
      req.setTimeout(
        timeoutMs,
        () => req.destroy(Object.assign(new Error("no answer in time"), { code: "ETIMEDOUT" })),
      );
      req.once(
        "error",
        (error: NodeJS.ErrnoException) =>
          fail(classify(error), `${error.code ?? ""} ${error.message}`.trim()),
      );
      req.end();
    });
    pending.add(done);
    void done.then(() => pending.delete(done));
  };

  const timers = [
    setInterval(() => send("keep-alive"), 1000 / (options.keepAlivePerSecond ?? 20)),
    setInterval(() => send("new-connection"), 1000 / (options.newConnectionPerSecond ?? 10)),
    setInterval(() => send("long"), options.longEveryMs ?? 500),
    ...((options.slowEveryMs ?? 0) > 0
      ? [setInterval(() => send("slow-reader"), options.slowEveryMs)]
      : []),
  ];
  let stopping: Promise<LoadSummary> | undefined;
  return {
    get ok() {
      return ok;
    },
    stop() {
      return (stopping ??= (async () => {
        for (const timer of timers) clearInterval(timer);
        while (pending.size > 0) await Promise.all([...pending]);
        keepAlive.destroy();
        const failedByClass = Object.fromEntries(
          CLASSES.map((c) => [c, failed.filter((f) => f.class === c).length]),
        ) as Record<FailureClass, number>;
        return {
          sent: KINDS.reduce((a, k) => a + sentByKind[k], 0),
          ok,
          okByKind,
          sentByKind,
          failed,
          failedByClass,
          longestMs,
          startedAt,
        };
      })());
    },
  };
}

/**
 * Reads a response to its end; at `bytesPerSecond` > 0 it pauses the stream to read no faster
 * (the socket's buffers fill and the sender is held back, as a slow client does). Keeps the
 * text of short bodies only.
 */
function readBody(
  res: IncomingMessage,
  bytesPerSecond: number,
): Promise<{ body: string; bytes: number; error?: Error }> {
  return new Promise((done) => {
    let body = "";
    let bytes = 0;
    const began = Date.now();
    res.on("data", (chunk: Buffer) => {
      bytes += chunk.length;
      if (body.length < 4096) body += chunk.toString("utf8");
      if (bytesPerSecond > 0) {
        const dueMs = (bytes / bytesPerSecond) * 1000 - (Date.now() - began);
        if (dueMs > 5) {
          res.pause();
          setTimeout(() => res.resume(), dueMs);
        }
      }
    });
    res.once("aborted", () => done({ body, bytes, error: new Error("response aborted") }));
    res.once("error", (error) => done({ body, bytes, error }));
    res.once(
      "end",
      () =>
        done({ body, bytes, error: res.complete ? undefined : new Error("response incomplete") }),
    );
  });
}
