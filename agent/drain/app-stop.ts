// `GET /v1/app-stop`, an app container's preStop: holds the app's SIGTERM until the proxy's inbound
// side is quiet (the floor passed, nothing in flight inbound) or the deadline, then stops taking
// new inbound requests; at a pod's end with nothing left for Envoy, once Envoy has stopped. No
// caller can start a drain with it, nor end one sooner than the pod's end would.
import { readdir, readFile, readlink } from "node:fs/promises";
import { delay, unlessAborted } from "../lib/async.ts";
import type { EventLog } from "../lib/log.ts";
import { isDrainHook } from "./hook.ts";
import { type DrainPlan, floorAt } from "./plan.ts";

/** How long a hook waits for a drain: none by then is a container's restart, not the pod's end. */
export const APP_STOP_NO_DRAIN_MS = 1000;

/**
 * How long a hook waits for a drain while the native sidecar's drain hook runs beside lastcall
 * (an exec preStop, slower to start than the app's httpGet under a loaded kubelet).
 */
export const APP_STOP_HOOK_SEEN_MS = 10_000;

/** Pause between two counts of what is in flight inbound, once the floor has passed. */
export const APP_STOP_POLL_MS = 50;

/** Longest one count may take before it is asked again. */
const COUNT_TIMEOUT_MS = 500;

/** Why a hook was answered. */
export type AppStopReason = "no_drain" | "quiet" | "deadline" | "stopping";

/** What `GET /v1/app-stop` answers (always 200: the kubelet goes on to SIGTERM the app). */
export interface AppStopAnswer {
  reason: AppStopReason;
  /** Whether lastcall has stopped taking new inbound requests. */
  inbound_closed: boolean;
  /** Whether Envoy had stopped (nothing left for it once the apps stop): no request can come. */
  envoy_stopped: boolean;
  /** From the first hook of this drain to its answer. */
  waited_ms: number;
}

/** What the gate needs from the agent. */
export interface AppStopDeps {
  /** The drain under way, if one began. */
  plan(): DrainPlan | undefined;
  /** Requests in flight inbound now, counted afresh; undefined when it cannot be told. */
  inboundInflight(signal: AbortSignal): Promise<number | undefined>;
  /** Stops taking new inbound requests (in-flight ones go on; outbound listeners stay). */
  closeInbound(why: string): Promise<void>;
  /**
   * Whether Envoy has nothing left to do once the apps stop: the pod is ending (a termination,
   * or a native sidecar's preStop), no listener carries calls out, and the termination would wait
   * for no app. The hook then has the proxy stopped before it answers.
   */
  proxyEndsWithApps(): boolean;
  /** Begins the termination by the apps (`app-stop`), unless one began. */
  endProxy(): void;
  log: EventLog;
  /** Aborts when lastcall closes: held hooks are answered. */
  closing: AbortSignal;
  /** Whether a drain hook's process is running now. @default {@linkcode drainHookRunning} */
  drainHookRunning?: () => Promise<boolean>;
}

/**
 * Whether a drain hook's process (`lastcall drain`, or the shell that sends SIGUSR2; see
 * drain/hook.ts) other than this one is running, as /proc shows the processes of lastcall's PID
 * namespace: in a pod, the sidecar's exec preStop. False where /proc cannot be read.
 *
 * @example
 * ```ts
 * await drainHookRunning(); // true while the kubelet's drain hook has not yet asked
 * ```
 */
export async function drainHookRunning(proc = "/proc"): Promise<boolean> {
  const [pids, self] = await Promise.all([
    readdir(proc).catch(() => [] as string[]),
    readlink(`${proc}/self`).catch(() => ""),
  ]);
  for (const pid of pids) {
    if (!/^\d+$/.test(pid) || pid === self) continue;
    const argv = (await readFile(`${proc}/${pid}/cmdline`, "utf8").catch(() => "")).split("\0");
    if (isDrainHook(argv)) return true;
  }
  return false;
}

/**
 * Answers app containers' preStop hooks. Every hook of one drain shares one wait, so the answer
 * is the same for all of them and inbound is closed once.
 *
 * @example
 * ```ts
 * const gate = new AppStopGate(deps);
 * onDrainStart(() => gate.drainBegan());
 * const answer = await gate.answer(); // { reason: "quiet", inbound_closed: true, waited_ms: 4210 }
 * ```
 */
export class AppStopGate {
  readonly #deps: AppStopDeps;
  #began!: () => void;
  readonly #begun = new Promise<void>((resolve) => (this.#began = resolve));
  #wait?: Promise<AppStopAnswer>;
  #stopped!: () => void;
  /** Settles once the termination has stopped Envoy ({@linkcode AppStopGate.proxyStopped}). */
  readonly #proxyStopped = new Promise<void>((resolve) => (this.#stopped = resolve));
  #envoyStopped = false;

  constructor(deps: AppStopDeps) {
    this.#deps = deps;
  }

  /** The termination has stopped Envoy: a hook waiting for it is answered. */
  proxyStopped(): void {
    this.#envoyStopped = true;
    this.#stopped();
  }

  /** A drain began (the termination, or `POST /drain`): hooks waiting for one go on. */
  drainBegan(): void {
    this.#began();
  }

  /** One hook: waits up to a second for a drain, then for the inbound side to be quiet. */
  async answer(): Promise<AppStopAnswer> {
    const asked = Date.now();
    this.#deps.log("app_stop_asked", { draining: this.#deps.plan() !== undefined });
    if (!this.#deps.plan()) {
      const begun = new AbortController(); // no timer left behind once a drain began
      const cut = AbortSignal.any([this.#deps.closing, begun.signal]);
      const waitFor = (ms: number) => Promise.race([this.#begun, delay(ms, cut).catch(() => {})]);
      await waitFor(APP_STOP_NO_DRAIN_MS);
      // The pod's end with the sidecar's own preStop still starting: its drain is coming.
      const running = this.#deps.drainHookRunning ?? drainHookRunning;
      while (
        !this.#deps.plan() && !cut.aborted && Date.now() - asked < APP_STOP_HOOK_SEEN_MS &&
        await running()
      ) {
        await waitFor(APP_STOP_POLL_MS);
      }
      begun.abort();
    }
    const plan = this.#deps.plan();
    if (!plan) {
      const waited = Date.now() - asked;
      this.#deps.log("app_stop", { reason: "no_drain", waited_ms: waited });
      return { reason: "no_drain", inbound_closed: false, envoy_stopped: false, waited_ms: waited };
    }
    this.#wait ??= this.#quiet(plan);
    return await this.#wait;
  }

  /**
   * Settles once the hooks' wait under way (if any) has been answered: the termination stops
   * Envoy only after, so the kubelet's `httpGet` gets its answer from a running lastcall.
   *
   * @example
   * ```ts
   * await gate.settled(); // at once when no hook waits
   * ```
   */
  async settled(): Promise<void> {
    await this.#wait;
  }

  /**
   * Waits for the floor and an inbound zero (or the deadline), then closes inbound. Where nothing
   * is left for the proxy, it is stopped first: a kept-alive connection could still bring a
   * request, which would reach an app told to stop; Envoy's exit closes them all.
   */
  async #quiet(plan: DrainPlan): Promise<AppStopAnswer> {
    const started = Date.now();
    this.#deps.log("app_stop_wait", {
      floor_in_ms: Math.max(0, floorAt(plan) - started),
      deadline_in_ms: plan.deadline - started,
    });
    let reason = await this.#untilQuiet(plan);
    if (reason !== "stopping") await this.#deps.closeInbound(`app-stop: ${reason}`);
    let stopped = false;
    if (reason !== "stopping" && this.#deps.proxyEndsWithApps()) {
      this.#deps.endProxy();
      stopped = await unlessAborted(this.#proxyStopped, this.#deps.closing).then(
        () => true,
        () => false,
      );
      if (!stopped) reason = "stopping";
    }
    const answer: AppStopAnswer = {
      reason,
      inbound_closed: reason !== "stopping",
      envoy_stopped: this.#envoyStopped,
      waited_ms: Date.now() - started,
    };
    this.#deps.log("app_stop", { ...answer });
    return answer;
  }

  async #untilQuiet(plan: DrainPlan): Promise<AppStopReason> {
    const { closing } = this.#deps;
    const pause = (ms: number, extra?: AbortSignal) =>
      delay(
        Math.min(ms, plan.deadline - Date.now()),
        extra ? AbortSignal.any([closing, extra]) : closing,
      ).then(() => true, () => !closing.aborted);
    for (;;) {
      if (closing.aborted) return "stopping";
      if (Date.now() >= plan.deadline) return "deadline";
      const floorLeft = floorAt(plan) - Date.now();
      if (floorLeft > 0) {
        await pause(floorLeft, plan.floorCut);
        continue;
      }
      const signal = AbortSignal.any([closing, AbortSignal.timeout(COUNT_TIMEOUT_MS)]);
      const inflight = await this.#deps.inboundInflight(signal).catch(() => undefined);
      if (inflight === 0) return "quiet";
      await pause(APP_STOP_POLL_MS);
    }
  }
}
