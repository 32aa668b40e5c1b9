// The client workload of the termination benchmark: what a pod's traffic looks like when it is told
// to stop.
import { Agent, type IncomingMessage, request } from "node:http";
import { type ClientHttp2Session, connect, constants } from "node:http2";
import WebSocket from "ws";
import { prng } from "../../test/filter/prng.ts";
import { slowDownload } from "../../test/support/slow-reader.ts";

/** Options of {@linkcode Workload}. */
export interface WorkloadOptions {
  /** Port of Envoy's `ingress` listener. */
  port: number;
  /** How long new requests keep arriving after the signal. */
  lagMs: number;
  /** Idle keep-alive connections. */
  idle: number;
  /** PRNG seed of the request durations. */
  seed: number;
}

/** Why a request failed. */
export type FailureKind = "5xx" | "refused" | "reset" | "other";

/** What the clients saw. */
export interface WorkloadOutcome {
  /** Requests (and streams, WebSocket) completed correctly. */
  ok: number;
  /** Failed ones by kind. */
  failed: Record<FailureKind, number>;
  /** performance.now() of the last correct completion. */
  lastGoodAt: number;
  /** Date.now() of the same moment: the clock of lastcall's event timestamps. */
  lastGoodWallMs: number;
  /** Completed correctly after the signal. */
  okAfterSignal: number;
  /** Idle connections closed by the proxy side (not a failure: nothing was asked on them). */
  idleClosed: number;
}

const DURATIONS_MS = [10, 10, 10, 50, 50, 200, 200, 1000, 3000];
const MIXED_CLIENTS = 6;
const LONG_CLIENTS = 2;
const H2_STREAMS = 4;
const LATE_EVERY_MS = 100;

function classify(error: unknown): FailureKind {
  const code = (error as { code?: string }).code ?? "";
  if (code === "ECONNREFUSED") return "refused";
  if (
    code === "ECONNRESET" || code === "EPIPE" ||
    /hang up|reset|aborted|premature/i.test(String(error))
  ) return "reset";
  return "other";
}

/** The workload; `start`, then `signal` at the moment the contender is told to stop, then `settled`. */
export class Workload {
  readonly #options: WorkloadOptions;
  readonly #random: () => number;
  readonly #agents: Agent[] = [];
  readonly #pending = new Set<Promise<unknown>>();
  readonly #outcome: WorkloadOutcome = {
    ok: 0,
    failed: { "5xx": 0, refused: 0, reset: 0, other: 0 },
    lastGoodAt: 0,
    lastGoodWallMs: 0,
    okAfterSignal: 0,
    idleClosed: 0,
  };
  readonly #failures: string[] = [];
  #signalAt = Number.POSITIVE_INFINITY;
  #stopAt = Number.POSITIVE_INFINITY;
  #h2: ClientHttp2Session | undefined;
  readonly #goaway = new WeakSet<ClientHttp2Session>();
  #socket: WebSocket | undefined;

  constructor(options: WorkloadOptions) {
    this.#options = options;
    this.#random = prng(options.seed);
  }

  /** What the clients saw so far. */
  get outcome(): WorkloadOutcome {
    return this.#outcome;
  }

  /** The first few failures, for the log. */
  get failures(): string[] {
    return this.#failures;
  }

  #duration(): number {
    return DURATIONS_MS[Math.floor(this.#random() * DURATIONS_MS.length)]!;
  }

  #sending(): boolean {
    return performance.now() < this.#stopAt;
  }

  #good(): void {
    const now = performance.now();
    this.#outcome.ok++;
    if (now >= this.#signalAt) this.#outcome.okAfterSignal++;
    if (now >= this.#outcome.lastGoodAt) {
      this.#outcome.lastGoodAt = now;
      this.#outcome.lastGoodWallMs = Date.now();
    }
  }

  #bad(kind: FailureKind, what: string): void {
    this.#outcome.failed[kind]++;
    if (this.#failures.length < 10) {
      this.#failures.push(
        `${kind}: ${what} at ${Math.round(performance.now() - this.#signalAt)} ms`,
      );
    }
  }

  #track<T>(promise: Promise<T>): Promise<T> {
    this.#pending.add(promise);
    void promise.finally(() => this.#pending.delete(promise));
    return promise;
  }

  /** One HTTP/1.1 GET; resolves when it completed or failed. */
  #get(path: string, agent: Agent | false): Promise<void> {
    return this.#track(
      new Promise<void>((done) => {
        const req = request(
          { host: "127.0.0.1", port: this.#options.port, path, agent },
          (res: IncomingMessage) => {
            res.resume();
            res.on("end", () => {
              if ((res.statusCode ?? 0) >= 500) this.#bad("5xx", `${path} ${res.statusCode}`);
              else if (res.complete) this.#good();
              else this.#bad("reset", `${path} incomplete`);
              done();
            });
            res.on("error", (error) => {
              this.#bad(classify(error), `${path} ${error.message}`);
              done();
            });
          },
        );
        req.on("error", (error) => {
          this.#bad(classify(error), `${path} ${(error as Error).message}`);
          done();
        });
        req.end();
      }),
    );
  }

  async #loop(agent: Agent, durationMs?: number): Promise<void> {
    while (this.#sending()) await this.#get(`/delay?ms=${durationMs ?? this.#duration()}`, agent);
  }

  #session(): ClientHttp2Session {
    if (!this.#h2 || this.#h2.closed || this.#h2.destroyed || this.#goaway.has(this.#h2)) {
      const session = connect(`http://127.0.0.1:${this.#options.port}`);
      session.on("error", () => {});
      session.on("goaway", () => this.#goaway.add(session));
      this.#h2 = session;
    }
    return this.#h2;
  }

  /** One HTTP/2 stream; a stream the server refused unprocessed (GOAWAY, REFUSED_STREAM) is sent again. */
  #h2Get(path: string): Promise<void> {
    return this.#track(
      new Promise<void>((done) => {
        const attempt = (tries: number) => {
          let stream;
          try {
            stream = this.#session().request({ ":path": path });
          } catch (error) {
            if (tries < 3) return attempt(tries + 1);
            this.#bad(classify(error), `h2 ${path} ${(error as Error).message}`);
            return done();
          }
          let status = 0;
          stream.on("response", (headers) => {
            status = Number(headers[":status"]);
          });
          stream.resume();
          stream.on("end", () => {});
          stream.on("close", () => {
            const code = stream.rstCode;
            if (
              status === 0 && code === constants.NGHTTP2_REFUSED_STREAM && tries < 3
            ) return attempt(tries + 1);
            if (status >= 500) this.#bad("5xx", `h2 ${path} ${status}`);
            else if (status > 0 && code === constants.NGHTTP2_NO_ERROR) this.#good();
            else if (status === 0 && code === constants.NGHTTP2_REFUSED_STREAM) {
              this.#bad("refused", `h2 ${path} refused`);
            } else this.#bad("reset", `h2 ${path} rst ${code} status ${status}`);
            done();
          });
          stream.on("error", () => {});
          stream.end();
        };
        attempt(0);
      }),
    );
  }

  async #h2Loop(): Promise<void> {
    while (this.#sending()) await this.#h2Get(`/delay?ms=${this.#duration()}`);
  }

  /** Opens every client and lets them run; resolves once the idle connections and the WebSocket are open. */
  async start(): Promise<void> {
    const keepAlive = () => {
      const agent = new Agent({ keepAlive: true, maxSockets: 1 });
      this.#agents.push(agent);
      return agent;
    };
    for (let i = 0; i < this.#options.idle; i++) {
      const agent = keepAlive();
      await this.#get("/", agent);
      for (const sockets of Object.values(agent.freeSockets)) {
        for (const socket of sockets ?? []) {
          socket.once("close", () => {
            this.#outcome.idleClosed++;
          });
        }
      }
    }
    const socket = new WebSocket(`ws://127.0.0.1:${this.#options.port}/ws`);
    await new Promise<void>((done, fail) => {
      socket.once("open", () => done());
      socket.once("error", fail);
    });
    this.#socket = socket;
    for (let i = 0; i < MIXED_CLIENTS; i++) void this.#track(this.#loop(keepAlive()));
    for (let i = 0; i < LONG_CLIENTS; i++) void this.#track(this.#loop(keepAlive(), 3000));
    for (let i = 0; i < H2_STREAMS; i++) void this.#track(this.#h2Loop());
  }

  /** A streaming response of `chunks` × 100 ms (checked whole: every chunk and a clean end). */
  stream(chunks: number): void {
    void this.#track(
      new Promise<void>((done) => {
        const req = request({
          host: "127.0.0.1",
          port: this.#options.port,
          path: `/stream?chunks=${chunks}&interval=100`,
          agent: false,
        }, (res) => {
          let body = "";
          res.setEncoding("utf8").on("data", (chunk: string) => {
            body += chunk;
          });
          res.on("end", () => {
            if (res.complete && body.split("\n").filter(Boolean).length === chunks) this.#good();
            else this.#bad("reset", "stream cut");
            done();
          });
          res.on("error", (error) => {
            this.#bad(classify(error), `stream ${error.message}`);
            done();
          });
        });
        req.on("error", (error) => {
          this.#bad(classify(error), `stream ${(error as Error).message}`);
          done();
        });
        req.end();
      }),
    );
  }

  /** A download of `bytes` read at `bytesPerSecond`; resolves once it is under way (a tenth read). */
  async slowReader(bytes: number, bytesPerSecond: number): Promise<void> {
    const download = slowDownload(this.#options.port, `/bytes?n=${bytes}`, bytesPerSecond);
    void this.#track(download.done.then((read) => {
      if (read.status === 200 && read.received === read.expected) this.#good();
      else {this.#bad(
          read.endedBy === "reset" ? "reset" : "other",
          `slow reader got ${read.received} of ${read.expected} bytes`,
        );}
    }));
    await Promise.race([download.reached(bytes / 10), download.done]);
  }

  /** The signal is being sent now: new requests go on for `lagMs`, late connections arrive. */
  signal(): void {
    this.#signalAt = performance.now();
    this.#stopAt = this.#signalAt + this.#options.lagMs;
    const late = setInterval(() => {
      if (!this.#sending()) return clearInterval(late);
      void this.#get(`/delay?ms=${this.#duration()}`, false);
    }, LATE_EVERY_MS);
    const socket = this.#socket!;
    const ping = setInterval(() => {
      if (socket.readyState === WebSocket.OPEN) socket.send("ping");
    }, 200);
    let closing = false;
    void this.#track(
      new Promise<void>((done) => {
        socket.once("close", (code: number) => {
          clearInterval(ping);
          if (closing && code === 1000) this.#good();
          else this.#bad("reset", `websocket closed ${code}`);
          done();
        });
        socket.on("error", () => {});
        setTimeout(() => {
          closing = true;
          socket.close(1000);
        }, 2500);
      }),
    );
  }

  /** Resolves when no request is in flight and no client will send again. */
  async settled(): Promise<void> {
    while (this.#pending.size > 0) await Promise.allSettled([...this.#pending]);
  }

  /** Closes whatever is left (idle connections, HTTP/2 session). */
  close(): void {
    for (const agent of this.#agents) agent.destroy();
    this.#h2?.destroy();
    this.#socket?.terminate();
  }
}
