// The live Envoy processes and how each is started: epoch 0 of a new generation (a cold start)
// or the next epoch of the current one (a hot restart). One record per process; the filter in it
// reports under `instance` (and `<instance>/tcp` for the TCP variant).
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { pollUntil } from "../lib/async.ts";
import { delay } from "../lib/delay.ts";
import { checkBootstrap, writeBootstrap } from "./bootstrap-file.ts";
import { AdminClient, readAdminAddress } from "../envoy/admin.ts";
import { envoyArgs } from "../envoy/args.ts";
import { type Bootstrap, TCP_INSTANCE_SUFFIX } from "../envoy/bootstrap.ts";
import type { TcpTableName } from "../envoy/sockets.ts";
import { type EnvoyProcess, spawnEnvoy, stopEnvoy } from "../envoy/process.ts";
import type { RunOptions } from "../options.ts";
import { ownPid } from "../runtime/process.ts";
import type { EpochInfo } from "../state.ts";
import { startProxyFor, type XdsHooks, xdsRedirectFor } from "../xds/per-envoy.ts";
import type { XdsProxy } from "../xds/proxy.ts";
import { XdsStats } from "../xds/stats.ts";

/** How long a cold start waits for Envoy to go LIVE before it validates the config beside it. */
export const VALIDATE_AFTER_MS = 1000;

/**
 * Resolves once a cold-started Envoy took its config: it went LIVE, or the validation passed.
 * The validation runs only when Envoy is gone before LIVE (it says whether the config was the
 * cause) or still starting after {@linkcode VALIDATE_AFTER_MS} (its output is held until then).
 */
async function accepted(
  live: Epoch,
  validate: () => Promise<void>,
  signal: AbortSignal,
): Promise<void> {
  const waited = new AbortController();
  const slow = delay(VALIDATE_AFTER_MS, AbortSignal.any([signal, waited.signal])).then(
    () => undefined,
    () => undefined,
  );
  const early = await Promise.race([live.whenReady, slow]);
  waited.abort();
  if (early === true) return;
  signal.throwIfAborted();
  const validation = validate();
  if (early === false) return validation;
  // Whichever comes first: the validation passed, or Envoy went LIVE. Envoy gone before either:
  // the validation says whether the config was the cause.
  validation.catch(() => {});
  const servedOrChecked = live.whenReady.then((ready) => (ready ? undefined : validation));
  await Promise.race([validation, servedOrChecked]);
}

/** One epoch: one Envoy process lastcall started, while it lives (`info` is what `/v1/state` shows of it). */
export interface Epoch {
  info: EpochInfo;
  process: EnvoyProcess;
  startedAt: number;
  bootstrap: Bootstrap;
  /** Admin client, once Envoy wrote its address. */
  admin?: AdminClient;
  /** Whether it answered LIVE at least once. */
  ready: boolean;
  /** Settles with `ready` once Envoy is LIVE, or false if it exited (or the wait was aborted). */
  whenReady: Promise<boolean>;
  /**
   * A hot-restart child asked this Envoy to close its admin (Envoy does so as the child starts,
   * ready or not): it can only be signalled now, and counted by its filter.
   */
  adminHandedOver: boolean;
  /** Its admin has not answered for a while (see health.ts). */
  hung: boolean;
  /** While hung: when its admin last answered (or it started). */
  silentSince?: number;
  /** Its listeners were asked to drain. */
  listenersDraining: boolean;
  /** Ids its filters report under. */
  reporters: string[];
  /** Its xDS proxy (agent/xds/), when its listeners come from LDS. */
  xds?: XdsProxy;
  /** Ports it was seen listening on (its listeners close before its last connections do). */
  listenPorts: Set<number>;
  /** The /proc/net tables those listening sockets were found in (tcp, tcp6). */
  listenTables: Set<TcpTableName>;
  /** Unix-socket paths it was seen listening on (its admin's excepted), as `listenPorts`. */
  listenPaths: Set<string>;
  /** Set once lastcall asked it to stop: its exit is then no crash. */
  stopAsked?: boolean;
  /** How the drain of this old epoch of a reload ended, for its `epoch_exit` line. */
  drained?: {
    drain_reason: string;
    inflight_at_stop: number;
    bytes_unsent_at_stop?: number;
    delivery_unchecked?: string[];
    /** Connections Envoy closed holding requests it never read (its delayed close). */
    unread_at_close?: number;
  };
}

/**
 * The fields of the `start` and `epoch` events: the process, and which listeners got the filter
 * (HTTP, TCP, outbound: counted, not drained), which are inbound (every one not marked
 * OUTBOUND), which only stats can count, and `listeners`: every static listener with its
 * direction as written and how it is counted (agent/envoy/direction.ts). LDS listeners are
 * named as they arrive, in `xds_listeners`.
 */
export function startFields(live: Epoch, filtered: boolean): Record<string, unknown> {
  const b = live.bootstrap;
  return {
    epoch: live.info.epoch,
    pid: live.info.pid,
    generation: live.info.generation,
    filter: filtered ? b.filteredListeners : [],
    filter_tcp: filtered ? b.tcpListeners : [],
    ...(filtered && b.outboundListeners.length ? { filter_outbound: b.outboundListeners } : {}),
    inbound: b.inboundListeners,
    listeners: b.listeners,
    ...(b.unseenListeners.length ? { counted_by_stats: b.unseenListeners } : {}),
    ...(b.xds?.relayed.length ? { xds: b.xds.relayed } : {}),
  };
}

/** Where one generation (a cold start and its hot restarts) keeps its files. */
interface Generation {
  number: number;
  baseIdPath: string;
  baseId?: number;
}

/** What starting one Envoy needs besides the options. */
export interface StartRequest {
  /** Hot restart: the next epoch of the current generation. */
  hot: boolean;
  statusPort: number;
  filterWasm?: string;
  reportToken: string;
  signal: AbortSignal;
  /** Give LDS listeners the filter through an xDS proxy per Envoy (agent/xds/). */
  xds?: XdsHooks;
  /**
   * Settles once the binary is known to be Envoy (envoy/identify.ts; asked once). Asked before
   * any validation and before a refused config is reported: a binary that is not Envoy is the
   * error then. A start that goes LIVE never needs it.
   */
  identify?(): Promise<unknown>;
  /** Told once Envoy's process is spawned: work that can wait runs beside its start. */
  spawned?(): void;
}

/**
 * The live Envoys, oldest first.
 *
 * @example
 * ```ts
 * const envoys = new Envoys(options, "/usr/bin/envoy", runDir);
 * const live = await envoys.start({ hot: false, statusPort, reportToken, signal });
 * ```
 */
export class Envoys {
  readonly #options: RunOptions;
  readonly #binary: string;
  readonly #runDir: string;
  readonly #live = new Map<string, Epoch>();
  #generation: Generation = { number: 0, baseIdPath: "" };
  #configText = "";
  /** Counters of every Envoy's xDS proxy, for `/metrics`. */
  readonly xdsStats = new XdsStats();
  /** Proxies of removed Envoys still closing (their socket folder removed last): awaited by close(). */
  readonly #closingProxies = new Set<Promise<void>>();

  constructor(options: RunOptions, binary: string, runDir: string) {
    this.#options = options;
    this.#binary = binary;
    this.#runDir = runDir;
  }

  /** Every live Envoy, oldest first. */
  all(): Epoch[] {
    return [...this.#live.values()];
  }

  get(instance: string): Epoch | undefined {
    return this.#live.get(instance);
  }

  /** The newest live Envoy. */
  newest(): Epoch | undefined {
    return this.all().at(-1);
  }

  /** The Envoy that serves: the newest that became ready (a hot-restart child once LIVE). */
  serving(): Epoch | undefined {
    return this.all().filter((l) => l.ready && l.process.running).at(-1);
  }

  /** Every id the filters of live Envoys report under. */
  reporters(): string[] {
    return this.all().filter((l) => l.process.running).flatMap((l) => l.reporters);
  }

  /** Forgets an Envoy that exited. */
  remove(instance: string): Epoch | undefined {
    const live = this.#live.get(instance);
    this.#live.delete(instance);
    const closing = live?.xds?.close().catch(() => {});
    if (closing) {
      this.#closingProxies.add(closing);
      void closing.then(() => this.#closingProxies.delete(closing));
    }
    return live;
  }

  /** Stops what serves the Envoys besides their processes (the xDS proxies), and waits for those closing. */
  async close(): Promise<void> {
    await Promise.all([...this.all().map((l) => l.xds?.close()), ...this.#closingProxies]);
  }

  /**
   * Derives, validates and starts the next Envoy. Returns whether the user's config text changed
   * since the last start (a new config refills the restart budget).
   */
  async start(request: StartRequest): Promise<{ live: Epoch; configChanged: boolean }> {
    const o = this.#options;
    const parent = request.hot ? this.newest() : undefined;
    const generation = parent ? this.#generation : {
      number: this.#generation.number + 1,
      baseIdPath: join(this.#runDir, `base-id-g${this.#generation.number + 1}`),
    };
    const epoch = parent ? parent.info.epoch + 1 : 0;
    const instance = `${ownPid()}-${generation.number}-${epoch}`;
    const name = `envoy-g${generation.number}-epoch${epoch}`;
    const xdsRedirect = request.filterWasm && request.xds
      ? xdsRedirectFor(this.#runDir, name)
      : undefined;
    const identify = request.identify ?? (() => Promise.resolve());
    const written = writeBootstrap(o, {
      runDir: this.#runDir,
      name,
      xds: xdsRedirect,
      epoch,
      instance,
      statusPort: request.statusPort,
      filterWasm: request.filterWasm,
      reportToken: request.reportToken,
      signal: request.signal,
    }).catch(async (error) => {
      await identify(); // not Envoy: that explains the unusable config
      throw error;
    });
    const prepared = await written;
    request.signal.throwIfAborted();
    // A refused config is said before anything starts. A hot restart's child starts only once
    // its config passed (it would take the serving parent's listeners); a cold start, with
    // nothing serving, starts Envoy at once, its output held until it goes LIVE or a validation
    // (only when it is gone or slow) accepts the config.
    const validating = new AbortController();
    const checkSignal = AbortSignal.any([request.signal, validating.signal]);
    const validate = async () => {
      await identify();
      await checkBootstrap(this.#binary, o, prepared.path, checkSignal);
    };
    if (parent) await validate();
    if (epoch > 0 && generation.baseId === undefined) {
      generation.baseId = Number((await readFile(generation.baseIdPath, "utf8")).trim());
    }
    const adminAddressPath = join(this.#runDir, `admin-g${generation.number}-epoch${epoch}`);
    const b = prepared.bootstrap;
    const filtered = request.filterWasm !== undefined;
    const reporters = [
      ...(filtered && b.filteredListeners.length + b.outboundListeners.length > 0
        ? [instance]
        : []),
      ...(filtered && b.tcpListeners.length > 0 ? [`${instance}${TCP_INSTANCE_SUFFIX}`] : []),
    ];
    // The xDS proxy serves before Envoy starts; LDS listeners that get the filter add reporters.
    const xds = b.xds && request.xds
      ? await startProxyFor(b.xds, this.xdsStats, request.xds, {
        http: instance,
        tcp: `${instance}${TCP_INSTANCE_SUFFIX}`,
      }, reporters)
      : undefined;
    const process = await spawnEnvoy(
      this.#binary,
      envoyArgs({
        configPath: prepared.path,
        concurrency: o.concurrency,
        epoch,
        baseIdPath: generation.baseIdPath,
        baseId: generation.baseId,
        hotRestart: o.hotRestart,
        adminAddressPath,
        drainTimeMs: o.drainTimeMs,
        parentShutdownMs: o.parentShutdownMs,
        extraArgs: o.envoyArgs,
      }),
      { holdOutput: !parent },
    ).catch(async (error) => {
      await xds?.close();
      throw error;
    });
    if (parent) parent.adminHandedOver = true;
    request.spawned?.();
    const live: Epoch = {
      info: { epoch, pid: process.pid, instance, generation: generation.number },
      process,
      startedAt: Date.now(),
      bootstrap: b,
      ready: false,
      whenReady: Promise.resolve(false),
      adminHandedOver: false,
      hung: false,
      listenersDraining: false,
      listenPorts: new Set(),
      listenTables: new Set(),
      listenPaths: new Set(),
      reporters,
      xds,
    };
    live.whenReady = this.#awaitReady(live, adminAddressPath);
    if (!parent) {
      try {
        await accepted(live, validate, checkSignal);
      } catch (error) {
        await stopEnvoy(process, 1000);
        await xds?.close();
        throw error;
      }
      validating.abort();
      process.releaseOutput();
    }
    const configChanged = this.#configText !== "" && prepared.text !== this.#configText;
    this.#configText = prepared.text;
    this.#generation = generation;
    this.#live.set(instance, live);
    return { live, configChanged };
  }

  /** Waits until the Envoy answers LIVE; false when it exits first. */
  async #awaitReady(live: Epoch, adminAddressPath: string): Promise<boolean> {
    const gone = new AbortController();
    live.process.exited.then(() => gone.abort(new Error("Envoy exited")));
    const stop = gone.signal;
    try {
      // Every 10 ms: a probe held for the start (`wait_ms`) is answered within 10 ms of LIVE.
      const url = await pollUntil(() => readAdminAddress(adminAddressPath), 10, stop);
      live.admin = new AdminClient(url);
      live.info.adminUrl = url;
      await pollUntil(
        async () => (await live.admin!.readiness(1000)).live ? true : undefined,
        10,
        stop,
      );
    } catch {
      return false;
    }
    live.ready = true;
    return true;
  }
}
