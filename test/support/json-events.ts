// Following a child's JSON event lines as they come, so a test waits on an event by name (past
// or future) instead of sleeping; used by the lastcall, hook-command and in-pod script helpers.
import type { Readable } from "node:stream";
import { createInterface } from "node:readline";

/** Options of {@linkcode followJsonEvents}. */
export interface FollowOptions<E> {
  /**
   * Turns one line into an event, or undefined to skip it.
   *
   * @default JSON.parse (a line that is not JSON throws)
   */
  parse?: (line: string) => E | undefined;
  /** Sees every line first, parsed or not (e.g. to keep the output for error messages). */
  onLine?: (line: string) => void;
}

/** What {@linkcode JsonEvents.next} says when the event does not come. */
export interface NextOptions<E> {
  /** Only an event this accepts counts. @default every event of that name */
  match?: (event: E) => boolean;
  /** How long to wait. */
  timeoutMs: number;
  /** The error when the child ended without the event. */
  ended: () => Error;
  /** The error when the time ran out. */
  timedOut: () => Error;
}

/** The events of one child, as they come. */
export interface JsonEvents<E extends { event: string }> {
  /** Every event so far, in order. */
  readonly events: E[];
  /** Says the child has ended: a wait for an event not seen yet then fails. */
  end(): void;
  /** Resolves with the first event named `name` (past or future) that matches. */
  next(name: string, options: NextOptions<E>): Promise<E>;
}

/**
 * Follows the JSON lines of `stdout`.
 *
 * @example
 * ```ts
 * const follow = followJsonEvents<{ event: string }>(child.stdout!);
 * child.once("close", () => follow.end());
 * await follow.next("ready", { timeoutMs: 5000, ended: () => new Error("exited"), timedOut: () => new Error("late") });
 * ```
 */
export function followJsonEvents<E extends { event: string }>(
  stdout: Readable,
  options: FollowOptions<E> = {},
): JsonEvents<E> {
  const parse = options.parse ?? ((line: string) => JSON.parse(line) as E);
  const events: E[] = [];
  const waiters = new Set<() => void>();
  const changed = () => waiters.forEach((check) => check());
  let ended = false;
  createInterface({ input: stdout }).on("line", (line) => {
    options.onLine?.(line);
    const event = parse(line);
    if (event !== undefined) events.push(event);
    changed();
  });
  const next = (
    name: string,
    { match = () => true, timeoutMs, ended: endedError, timedOut }: NextOptions<E>,
  ) =>
    new Promise<E>((resolve, reject) => {
      const finish = (settle: () => void) => {
        clearTimeout(timer);
        waiters.delete(check);
        settle();
      };
      const check = () => {
        const found = events.find((e) => e.event === name && match(e));
        if (found) finish(() => resolve(found));
        else if (ended) finish(() => reject(endedError()));
      };
      const timer = setTimeout(() => finish(() => reject(timedOut())), timeoutMs);
      waiters.add(check);
      check();
    });
  return {
    events,
    end: () => {
      ended = true;
      changed();
    },
    next,
  };
}
