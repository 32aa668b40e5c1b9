// A lastcall whose Envoy serves and whose filter reports, and what its status server says: the
// starting point of the termination tests.
import { readFileSync } from "node:fs";
import { afterAll, afterEach, beforeAll, expect } from "vitest";
import { http1, type Outcome } from "../filter/clients.ts";
import { waitFor } from "./envoy.ts";
import {
  inboundConfig,
  startLastcall,
  type StartOptions,
  stopAllLastcalls,
  type TestLastcall,
} from "./lastcall.ts";
import { startUpstreamApp, type UpstreamApp } from "./upstream-app.ts";

/**
 * One upstream app for a test file: started before its tests, closed after them; after each
 * test every lastcall it started is killed and held requests are released.
 */
export function upstreamForFile(): UpstreamApp {
  let app: UpstreamApp | undefined;
  beforeAll(async () => (app = await startUpstreamApp()));
  afterAll(() => app?.close());
  afterEach(async () => {
    await stopAllLastcalls();
    app?.release();
  });
  return new Proxy({} as UpstreamApp, {
    get(_, key) {
      if (!app) throw new Error("The upstream app is used before beforeAll started it");
      const value = Reflect.get(app, key, app);
      return typeof value === "function" ? value.bind(app) : value;
    },
  });
}

/** A lastcall whose Envoy is ready and whose filter has reported at least once. */
export interface Serving {
  lc: TestLastcall;
  /** Port of the listener the tests send to (`ingress` unless told; 0 for `listener: null`). */
  port: number;
  /** Status server base URL. */
  status: string;
  envoyPid: number;
}

/** What `/v1/state` says, in the parts the tests read. */
export interface AgentStateView {
  inflight: number;
  filter: string;
  phase: string;
  current?: { epoch: number; pid: number; instance: string };
  serving?: { epoch: number; pid: number; instance: string };
  epochs: Array<{ epoch: number; pid: number; instance: string }>;
  /** While a drain is under way: what it waits for (agent/drain/waiting.ts). */
  drain?: Record<string, unknown>;
}

/** Options of {@linkcode serving}. */
export interface ServingOptions extends Pick<StartOptions, "env" | "envoyArgs"> {
  healthCheck?: boolean;
  /** Wait for the filter's first report. @default true */
  filter?: boolean;
  /** The user's Envoy config. @default inboundConfig in front of `upstreamPort` */
  config?: unknown;
  /** The config's listener the tests send to; null: none with a port (a unix socket's path). @default "ingress" */
  listener?: string | null;
}

/** Reads `/v1/state`. */
export async function agentState(status: string): Promise<AgentStateView> {
  return await (await fetch(`${status}/v1/state`)).json() as AgentStateView;
}

/** Waits until the agent's view of the filter's count is `n` (it heard the report). */
export function agentSees(status: string, n: number): Promise<true> {
  return waitFor(async () => ((await agentState(status)).inflight === n ? true : undefined), {
    what: `the agent to see ${n} in flight`,
  });
}

/** Starts lastcall in front of the app on `upstreamPort` and waits until it serves. */
export async function serving(
  upstreamPort: number,
  args: string[],
  options: ServingOptions = {},
): Promise<Serving> {
  const config = options.config ??
    inboundConfig({ upstreamPort, healthCheck: options.healthCheck });
  const lc = startLastcall(config, { args, env: options.env, envoyArgs: options.envoyArgs });
  const ready = await lc.event("ready");
  const status = await lc.statusUrl();
  if (options.filter !== false) {
    await waitFor(
      async () => ((await agentState(status)).filter === "reporting" ? true : undefined),
      { what: "the filter's first report" },
    );
  }
  const port = options.listener === null ? 0 : await lc.listenerPort(options.listener ?? "ingress");
  return { lc, port, status, envoyPid: Number(ready.pid) };
}

/** One request the app holds, and the agent sure of it (wrapped: an async function would await it). */
export async function holdOne(
  app: UpstreamApp,
  port: number,
  status: string,
): Promise<{ held: Promise<Outcome> }> {
  const held = http1(port, "/hold");
  await app.until((a) => a.held === 1);
  await agentSees(status, 1);
  return { held };
}

/**
 * One request held across SIGTERM: the listeners drain, the request is released and answered,
 * and the drain ends on the filter's confirmed zero with nothing in flight at the stop.
 */
export async function heldAcrossSigterm(
  app: UpstreamApp,
  lc: TestLastcall,
  port: number,
  status: string,
): Promise<void> {
  const { held } = await holdOne(app, port, status);
  lc.signal("SIGTERM");
  await lc.event("listeners_draining");
  app.release();
  expect(await held).toEqual({ status: 200, reset: false });
  expect(await lc.event("terminated")).toMatchObject({
    reason: "inflight_zero",
    inflight_at_stop: 0,
  });
}

/** The report token in the bootstrap Envoy `pid` runs (`-c <file>` on its command line). */
export function reportToken(pid: number): string {
  const args = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
  const text = readFileSync(args[args.indexOf("-c") + 1], "utf8");
  const token = /token\\*"\s*:\s*\\*"([A-Za-z0-9_-]+)/.exec(text)?.[1];
  if (!token) {
    throw new Error(`No report token in Envoy's bootstrap ${args[args.indexOf("-c") + 1]}`);
  }
  return token;
}
