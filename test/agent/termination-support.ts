// Helpers of the termination tests (termination*.test.ts, exact-count*.test.ts): lastcall's
// event names, whether its drain has ended, and lastcall serving in front of the file's app.
import type { TestLastcall } from "../support/lastcall.ts";
import { type Serving, serving as servingAt, type ServingOptions } from "../support/serving.ts";
import type { UpstreamApp } from "../support/upstream-app.ts";

/** The names of the events lastcall has logged so far, in order. */
export function names(lc: TestLastcall): string[] {
  return lc.events.map((e) => e.event);
}

/** Whether the drain has ended: lastcall logged `drain_wait_done` or `terminated`. */
export function ended(lc: TestLastcall): boolean {
  return names(lc).some((n) => n === "drain_wait_done" || n === "terminated");
}

/** `serving` (test/support/serving.ts) in front of `app`: `(args, options) => Serving`. */
export function servingFor(
  app: UpstreamApp,
): (args: string[], options?: ServingOptions) => Promise<Serving> {
  return (args, options = {}) => servingAt(app.port, args, options);
}
