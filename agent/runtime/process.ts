// The only module that touches the host process: Node and Deno both provide `node:process`,
// so the agent stays runtime-neutral by going through here.
import inspector from "node:inspector";
import { constants as osConstants } from "node:os";
import process from "node:process";
import { setTimeout } from "node:timers";

// A log reader that goes away (a closed pipe: EPIPE) must not take the proxy down in the middle
// of a drain: what is written after that is dropped. A command that prints a result says so in
// its exit status (exitWith); one that writes an event log (writeLog) keeps its own.
let outputIsLog = false;
/**
 * The streams a write to failed: output was lost, and nothing more is flushed to them (Deno
 * never calls back).
 */
const failed = new Set<NodeJS.WriteStream>();
/** Why standard output failed when its reader did not just go away (a full disk: ENOSPC). */
let outputFault: string | undefined;
for (const stream of [process.stdout, process.stderr]) {
  stream.on("error", (error: NodeJS.ErrnoException) => lost(stream, error));
}

/** Notes a failed write: Node reports it as an event, Deno throws it from the write. */
function lost(stream: NodeJS.WriteStream, error: NodeJS.ErrnoException): void {
  failed.add(stream);
  if (stream === process.stdout && error.code !== "EPIPE") {
    outputFault ??= error.code ?? error.message;
  }
}

/** Writes to standard output or error; a write that fails is noted, never thrown. */
function write(stream: NodeJS.WriteStream, chunk: string | Uint8Array): void {
  try {
    stream.write(chunk);
  } catch (error) {
    lost(stream, error as NodeJS.ErrnoException);
  }
}

/** Environment variables of the agent's process. */
export function environment(): Record<string, string | undefined> {
  return process.env;
}

/** Command-line arguments after the program (and script) name. */
export function commandArguments(): string[] {
  return process.argv.slice(2);
}

/** The name the process was started under: the last part of its `argv[0]` (`envoy-gateway` through a link). */
export function invokedAs(): string {
  return process.argv0.split("/").pop() ?? "";
}

/** Process id of the agent. */
export function ownPid(): number {
  return process.pid;
}

/**
 * Reads standard input to its end, as a stream the event loop waits on: a signal meanwhile is
 * handled at once (a blocking read held it until the writer closed the pipe).
 */
export async function readStandardInput(): Promise<string> {
  process.stdin.setEncoding("utf8"); // a character split across two chunks is decoded whole
  let text = "";
  for await (const chunk of process.stdin) text += chunk;
  return text;
}

/** Writes one line to standard output. */
export function writeOut(line: string): void {
  write(process.stdout, line.endsWith("\n") ? line : `${line}\n`);
}

/** Writes one line of the event log to standard output (a lost log line is no lost result). */
export function writeLog(line: string): void {
  outputIsLog = true;
  writeOut(line);
}

/** Writes one line to standard error. */
export function writeErr(line: string): void {
  write(process.stderr, line.endsWith("\n") ? line : `${line}\n`);
}

/** Passes a chunk of a child's output through to standard error as it is. */
export function writeErrChunk(chunk: Uint8Array): void {
  write(process.stderr, chunk);
}

/** The exit status of a command whose printed result was lost (as SIGPIPE's). */
export const OUTPUT_LOST_STATUS = 141;

/**
 * Ends the agent with an exit code once everything written to standard output and error has
 * been taken by their readers: a pipe takes 64 KiB at a time, and `process.exit` drops what the
 * runtime still queues. A reader that went away makes a success {@linkcode OUTPUT_LOST_STATUS},
 * unless what it lost was an event log; standard output that failed otherwise (a full disk)
 * makes it exit 1, with one line on standard error.
 */
export async function exitWith(code: number): Promise<never> {
  process.exitCode = code;
  await Promise.all([flushed(process.stdout), flushed(process.stderr)]);
  if (outputFault && !outputIsLog && code === 0) {
    writeErr(
      `lastcall: cannot write standard output (${outputFault}): what it printed is incomplete`,
    );
    await flushed(process.stderr);
    process.exit(1);
  }
  process.exit(failed.size > 0 && !outputIsLog && code === 0 ? OUTPUT_LOST_STATUS : code);
}

/** Resolves once `stream` has handed everything written before to the kernel (or failed). */
function flushed(stream: NodeJS.WriteStream): Promise<void> {
  if (stream.destroyed || failed.has(stream)) return Promise.resolve();
  return new Promise((resolve) => stream.write("", () => resolve()));
}

/** The signals lastcall gives a meaning to, in every command (docs/operations.md, "Signals"). */
export const HANDLED_SIGNALS = [
  "SIGTERM",
  "SIGINT",
  "SIGQUIT",
  "SIGHUP",
  "SIGUSR1",
  "SIGUSR2",
] as const;

/** One of {@linkcode HANDLED_SIGNALS}. */
export type HandledSignal = typeof HANDLED_SIGNALS[number];

/** The signals that ask a process to stop. */
export type StopSignal = "SIGTERM" | "SIGINT" | "SIGQUIT";

/** {@linkcode StopSignal}s, in the order they are documented. */
export const STOP_SIGNALS: readonly StopSignal[] = ["SIGTERM", "SIGINT", "SIGQUIT"];

/** The exit status of a process stopped by `signal`, the way shells report it: 128 + its number. */
export function signalStatus(signal: NodeJS.Signals): number {
  return 128 + ((osConstants.signals as Record<string, number>)[signal] ?? 0);
}

// One process listener per signal, for the whole life of the process, installed as this module
// is loaded (main.ts imports it first): no signal ever meets the runtime's default action. The
// defaults are what hurts: SIGQUIT and SIGUSR2 kill Node; SIGUSR1 opens Node's inspector on
// 127.0.0.1:9229 (any container of the pod could then run code inside lastcall); and as PID 1
// a signal without a handler is dropped. A listener is never removed either: removing Node's
// last one puts the default action back. Commands add handlers with onSignal; a signal no
// command handles is dealt with by unhandled().
const handlers = new Map<HandledSignal, Array<() => void>>(
  HANDLED_SIGNALS.map((signal) => [signal, []]),
);

/** A signal no command handles: a stop signal ends the process (nothing runs yet, or any more); the others are ignored. */
function unhandled(signal: HandledSignal): void {
  if (!(STOP_SIGNALS as readonly string[]).includes(signal)) return;
  writeErr(`lastcall: stopped by ${signal}`);
  exitWith(signalStatus(signal));
}

/**
 * How long after a SIGUSR1 lastcall looks out for an inspector a runtime opened anyway: every
 * millisecond for the first 100 ms, then every 10 ms (a loaded node opens it late, not never).
 */
const INSPECTOR_WATCH_MS = 10_000;

/** An inspector open before any signal could open one: the operator's `--inspect`, left open. */
const operatorInspector = inspector.url() !== undefined;

// Node opens no inspector once a SIGUSR1 listener exists. Deno (2.9.2 and later) opens its
// inspector on SIGUSR1 whatever listeners there are, a moment after they ran (later on a loaded
// node): it is closed as soon as it is seen. Whose inspector it is was decided as the process
// started, not when the signal came: one the runtime opened before this listener ran is closed too.
function closeInspectorOpenedBySignal(): void {
  if (operatorInspector) return;
  const since = Date.now();
  const look = () => {
    if (inspector.url()) {
      inspector.close();
      writeErr("lastcall: closed the inspector the runtime opened on SIGUSR1");
      return;
    }
    const waited = Date.now() - since;
    if (waited < INSPECTOR_WATCH_MS) setTimeout(look, waited < 100 ? 1 : 10).unref();
  };
  setTimeout(look, 0).unref();
}

for (const signal of HANDLED_SIGNALS) {
  process.on(signal, () => {
    if (signal === "SIGUSR1") closeInspectorOpenedBySignal();
    const list = handlers.get(signal)!;
    if (list.length === 0) return unhandled(signal);
    for (const handler of [...list]) handler();
  });
}

/**
 * Calls `handler` on each delivery of `signal`; returns a function that removes the handler.
 * While a signal has handlers, they are all it does.
 *
 * @example
 * ```ts
 * const off = onSignal("SIGHUP", () => reload());
 * ```
 */
export function onSignal(signal: HandledSignal, handler: () => void): () => void {
  const list = handlers.get(signal)!;
  list.push(handler);
  return () => {
    const at = list.indexOf(handler);
    if (at >= 0) list.splice(at, 1);
  };
}

/**
 * Resolves with the first of `signals` delivered to the agent.
 *
 * @example
 * ```ts
 * const signal = await nextSignal(STOP_SIGNALS);
 * ```
 */
export function nextSignal<S extends HandledSignal>(signals: readonly S[]): Promise<S> {
  return new Promise((resolve) => {
    const offs = signals.map((signal) =>
      onSignal(signal, () => {
        for (const off of offs) off();
        resolve(signal);
      })
    );
  });
}
