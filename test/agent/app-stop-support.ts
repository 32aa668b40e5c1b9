// What the app's-preStop tests (app-stop*.test.ts) share: the hook as the kubelet asks it, the
// order of lastcall's events, and a pod's end under a slow reader.
import { expect } from "vitest";
import { type LastcallEvent, runLastcall, type TestLastcall } from "../support/lastcall.ts";
import type { SlowDownload } from "../support/slow-reader.ts";
import { BODY, RATE } from "./delivery-support.ts";

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

/**
 * The pod's end under a slow reader: the sidecar's preStop, then the app's, `during` once the
 * app's is asked; every byte read, the hook answered after Envoy's stop, lastcall exited 0.
 */
export async function podEndsUnder(
  lc: TestLastcall,
  status: string,
  download: SlowDownload,
  during: () => Promise<unknown> | void = () => {},
): Promise<void> {
  await download.reached(RATE);
  expect((await runLastcall(["drain", "--status-url", status])).code).toBe(0);
  const [answer] = await Promise.all([appStop(status), during()]);
  expect(answer).toMatchObject({ reason: "quiet", inbound_closed: true, envoy_stopped: true });
  expect(await download.done).toEqual({
    status: 200,
    expected: BODY,
    received: BODY,
    endedBy: "fin",
  });
  expect(await lc.event("terminate")).toMatchObject({ source: "app-stop" });
  expect(await lc.event("terminated")).toMatchObject({
    inflight_at_stop: 0,
    bytes_unsent_at_stop: 0,
  });
  // The answer came once Envoy had stopped, which it did only with every byte delivered.
  expect(order(lc, "app_stop")).toBeGreaterThan(order(lc, "envoy_quit_requested"));
  expect(await lc.exited).toEqual({ code: 0, signal: null });
}
