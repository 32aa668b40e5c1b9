// What the app's-preStop tests (app-stop*.test.ts) share: the hook as the kubelet asks it, and
// the order of lastcall's events.
import { expect } from "vitest";
import type { LastcallEvent, TestLastcall } from "../support/lastcall.ts";

/** `GET /v1/app-stop`, as the kubelet sends an httpGet preStop. */
export async function appStop(status: string): Promise<Record<string, unknown>> {
  const response = await fetch(`${status}/v1/app-stop`);
  expect(response.status).toBe(200);
  return await response.json() as Record<string, unknown>;
}

/** The index of the first event named `name` (and matching `match`). */
export function order(
  lc: TestLastcall,
  name: string,
  match: (e: LastcallEvent) => boolean = () => true,
): number {
  return lc.events.findIndex((e) => e.event === name && match(e));
}
