// The only module that touches the host process: Node and Deno both provide `node:process`,
// so the agent stays runtime-neutral by going through here.
import process from "node:process";

// A log reader that goes away (a closed pipe: EPIPE) must not take the proxy down in the middle
// of a drain: what is written after that is dropped.
for (const stream of [process.stdout, process.stderr]) stream.on("error", () => {});

/** Environment variables of the agent's process. */
export function environment(): Record<string, string | undefined> {
  return process.env;
}

/** Command-line arguments after the program (and script) name. */
export function commandArguments(): string[] {
  return process.argv.slice(2);
}

/** Process id of the agent. */
export function ownPid(): number {
  return process.pid;
}

/** Writes one line to standard output. */
export function writeOut(line: string): void {
  process.stdout.write(line.endsWith("\n") ? line : `${line}\n`);
}

/** Writes one line to standard error. */
export function writeErr(line: string): void {
  process.stderr.write(line.endsWith("\n") ? line : `${line}\n`);
}

/** Passes a chunk of a child's output through to standard error as it is. */
export function writeErrChunk(chunk: Uint8Array): void {
  process.stderr.write(chunk);
}

/** Ends the agent with an exit code once pending output is flushed. */
export function exitWith(code: number): never {
  process.exitCode = code;
  process.exit(code);
}

/** Signals the agent reacts to. */
export type StopSignal = "SIGTERM" | "SIGINT" | "SIGHUP";

/**
 * Calls `handler` on each delivery of `signal`; returns a function that removes the handler.
 *
 * @example
 * ```ts
 * const off = onSignal("SIGHUP", () => reload());
 * ```
 */
export function onSignal(signal: StopSignal, handler: () => void): () => void {
  process.on(signal, handler);
  return () => process.off(signal, handler);
}

/** Resolves with the first of `signals` delivered to the agent. */
export function nextSignal(signals: readonly StopSignal[]): Promise<StopSignal> {
  return new Promise((resolve) => {
    const offs = signals.map((signal) => onSignal(signal, () => {
      for (const off of offs) off();
      resolve(signal);
    }));
  });
}
