import { writeErr } from "../runtime/process.ts";

/** Options of {@linkcode requestDrain}. */
export interface DrainOptions {
  /** The agent's status server's origin, as `statusUrlArg` (options.ts) reads `--status-url`. @default "http://127.0.0.1:15020" */
  statusUrl: string;
  /** Give up after this long. @default 5000 */
  timeoutMs: number;
}

/**
 * `lastcall drain`: asks the agent to drain without exiting (`POST /drain`). Meant for a native
 * sidecar's preStop hook, which runs when the pod starts terminating, while the sidecar's own
 * SIGTERM only comes after the app has exited. Exits 1 when the agent cannot be asked.
 *
 * @example
 * ```ts
 * process.exitCode = await requestDrain({ statusUrl: "http://127.0.0.1:15020", timeoutMs: 5000 });
 * ```
 */
export async function requestDrain(options: DrainOptions): Promise<number> {
  // `sidecar=native`: the sidecar's SIGTERM, which the kubelet sends once every app container has
  // exited, then also means that nothing is left to forward inbound requests to. `asked_at`: this
  // process's start, as the pod's deletion set it going (the floor runs from it, not from now).
  const url = new URL("/drain?sidecar=native", options.statusUrl);
  const asked = new URL(`${url}&asked_at=${Math.floor(performance.timeOrigin)}`);
  try {
    const response = await fetch(asked, {
      method: "POST",
      signal: AbortSignal.timeout(options.timeoutMs),
    });
    if (response.ok) return 0;
    writeErr(`lastcall drain: ${url} answered ${response.status}`);
  } catch (error) {
    // fetch says only "fetch failed"; the reason (ECONNREFUSED, …) is in its cause.
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    writeErr(
      `lastcall drain: cannot reach the agent at ${url}: ${
        cause?.code ?? cause?.message ?? (error as Error).message
      }`,
    );
  }
  return 1;
}
