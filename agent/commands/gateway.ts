// Envoy Gateway's shutdown pair, flag for flag (`gateway shutdown-manager` and `gateway shutdown`),
// also run as `envoy-gateway envoy …`.
import type { Command } from "commander";
import { InvalidArgumentError } from "commander";
import { GATEWAY_DEFAULTS } from "../k8s/proxy-gateway.ts";
import { goDurationMs } from "../k8s/timing.ts";
import { delay } from "../lib/async.ts";
import { MAX_DURATION_MS, MAX_DURATION_TEXT } from "../lib/duration.ts";
import { createEventLog, type EventLog } from "../lib/log.ts";
import { durationArg, integerArg, option } from "../options.ts";
import { nextSignal, STOP_SIGNALS } from "../runtime/process.ts";
import type { StatusServer } from "../status/listen.ts";
import {
  adminFor,
  readOpenCount,
  serveReadyFile,
  startAgentDrain,
  writeReadyFile,
} from "./drain-hooks.ts";
import { DEFAULT_STATUS_BASE, optionalStatusUrlArg } from "./status.ts";

/** Envoy Gateway's fixed names: `ShutdownManagerPort`, its paths, `ShutdownReadyFile`, `EnvoyAdminPort`. */
export const GATEWAY = {
  servePort: 19002,
  healthPath: "/healthz",
  readyPath: "/shutdown/ready",
  readyFile: "/tmp/shutdown-ready",
  adminAddress: "localhost:19000",
} as const;

/** Options of {@linkcode gatewayShutdownManager}. */
export interface GatewayShutdownManagerOptions {
  /** `/shutdown/ready` answers 500 when the ready file has not come after this long. @default 610000 */
  readyTimeoutMs: number;
  /** Port of `/healthz` and `/shutdown/ready` (fixed in Envoy Gateway). @default 19002 */
  servePort: number;
  /** The file `gateway shutdown` writes (fixed in Envoy Gateway). @default "/tmp/shutdown-ready" */
  readyFile: string;
}

/**
 * Serves Envoy Gateway's shutdown-manager endpoints until stopped: `GET /healthz` (200, empty)
 * and `GET /shutdown/ready`: 200 once the ready file exists, 500 after `--ready-timeout`.
 *
 * @example
 * ```ts
 * const server = await gatewayShutdownManager({ readyTimeoutMs: 610_000, servePort: 19002, readyFile: "/tmp/shutdown-ready" }, log);
 * ```
 */
export function gatewayShutdownManager(
  options: GatewayShutdownManagerOptions,
  log: EventLog,
): Promise<StatusServer> {
  return serveReadyFile({
    port: options.servePort,
    healthPath: GATEWAY.healthPath,
    healthBody: "",
    readyPath: GATEWAY.readyPath,
    readyBody: "",
    readyFile: options.readyFile,
    readyTimeoutMs: options.readyTimeoutMs,
  }, log);
}

/** Options of {@linkcode gatewayShutdown}, with Envoy Gateway's names and defaults. */
export interface GatewayShutdownOptions {
  /** Drain listeners first and fail Envoy's health check only this long after the start. @default 0 */
  healthCheckFailureDelayMs: number;
  /** The drain ends at this point whatever is still open. @default 60000 */
  drainTimeoutMs: number;
  /** The drain never ends before this (endpoint deprogramming). @default 10000 */
  minDrainDurationMs: number;
  /** After the minimum, the drain ends at or below this many. @default 0 */
  exitAtConnections: number;
  /** Envoy's admin: `host:port` or a Unix socket path (fixed in Envoy Gateway). @default "localhost:19000" */
  adminAddress: string;
  /** Time between checks (Envoy Gateway: 1 s). @default 1000 */
  checkIntervalMs: number;
  /** Written when the drain is finished (fixed in Envoy Gateway). @default "/tmp/shutdown-ready" */
  readyFile: string;
  /** A `lastcall run` beside Envoy: its drain starts with this one. @default "http://127.0.0.1:15020" */
  statusUrl?: string;
}

/** Envoy Gateway's first step: fail health checks now, or drain the listeners now and fail them later. */
async function beginDrain(options: GatewayShutdownOptions, log: EventLog): Promise<boolean> {
  const admin = adminFor(options.adminAddress);
  if (options.healthCheckFailureDelayMs > 0) {
    try {
      await admin.request("POST", "/drain_listeners?graceful&skip_exit");
      log("listeners_draining");
    } catch (error) {
      log("drain_listeners_error", { error: String(error) });
    }
    log("healthcheck_fail_delayed", { ms: options.healthCheckFailureDelayMs });
    return true;
  }
  await failHealthcheck(options, log);
  return false;
}

/** `POST /healthcheck/fail` once, as Envoy Gateway does (its failure is logged, not retried). */
async function failHealthcheck(options: GatewayShutdownOptions, log: EventLog): Promise<void> {
  try {
    await adminFor(options.adminAddress).failHealthcheck();
    log("healthcheck_failed");
  } catch (error) {
    log("healthcheck_fail_error", { error: String(error) });
  }
}

/**
 * `lastcall gateway shutdown`, in Envoy Gateway's order: with `--health-check-failure-delay`,
 * drain the listeners (`drain_listeners?graceful&skip_exit`) and fail Envoy's health check once
 * the delay has passed, else fail it at once; start the drain of a `lastcall run` beside Envoy;
 * then every `--check-interval` read the open count (`open_count`) and end when
 * `--min-drain-duration` has passed and the count is at most `--exit-at-connections`
 * (`drained reason count`), or `--drain-timeout` has passed (`drained reason timeout`); then the
 * ready file. As in Envoy Gateway, an Envoy that does not answer is asked again until the timeout.
 * With the lastcall filter in Envoy it counts requests in flight, not open connections.
 *
 * @example
 * ```ts
 * process.exitCode = await gatewayShutdown({ healthCheckFailureDelayMs: 0, drainTimeoutMs: 60_000, minDrainDurationMs: 10_000, exitAtConnections: 0, adminAddress: "localhost:19000", checkIntervalMs: 1000, readyFile: "/tmp/shutdown-ready" }, log);
 * ```
 */
export async function gatewayShutdown(
  options: GatewayShutdownOptions,
  log: EventLog,
): Promise<number> {
  const started = Date.now();
  log("drain_begin", {
    min_drain_ms: options.minDrainDurationMs,
    timeout_ms: options.drainTimeoutMs,
    exit_at: options.exitAtConnections,
  });
  let healthCheckPending = await beginDrain(options, log);
  if (options.statusUrl) await startAgentDrain(options.statusUrl, log);
  const admin = adminFor(options.adminAddress);
  let allowedToExit = false;
  for (;;) {
    const elapsed = Date.now() - started;
    if (healthCheckPending && elapsed >= options.healthCheckFailureDelayMs) {
      await failHealthcheck(options, log);
      healthCheckPending = false;
    }
    let count: number | undefined;
    try {
      const open = await readOpenCount(admin, "gateway");
      count = open.count;
      log("open_count", { what: open.what, count, exit_at: options.exitAtConnections });
    } catch (error) {
      log("open_count_failed", { error: String(error) });
    }
    if (elapsed > options.minDrainDurationMs && !allowedToExit) {
      allowedToExit = true;
      log("min_drain_reached", { ms: elapsed });
    }
    if (elapsed > options.drainTimeoutMs) {
      await writeReadyFile(options.readyFile, log, { reason: "timeout", ms: Date.now() - started });
      return 0;
    }
    if (allowedToExit && count !== undefined && count <= options.exitAtConnections) {
      await writeReadyFile(options.readyFile, log, { reason: "count", ms: Date.now() - started });
      return 0;
    }
    await delay(options.checkIntervalMs);
  }
}

/**
 * The command line as lastcall reads it when started under `name`: as `envoy-gateway` (a link to
 * lastcall in its image, which Envoy Gateway's pods run as `envoy-gateway envoy shutdown-manager`
 * and `envoy-gateway envoy shutdown`), `envoy` means `gateway`; otherwise it is left as it is.
 *
 * @example
 * ```ts
 * asInvoked(["envoy", "shutdown", "--drain-timeout=60s"], "envoy-gateway"); // ["gateway", "shutdown", "--drain-timeout=60s"]
 * ```
 */
export function asInvoked(argv: string[], name: string): string[] {
  return name === "envoy-gateway" && argv[0] === "envoy" ? ["gateway", ...argv.slice(1)] : argv;
}

/** A duration as Envoy Gateway writes its flags (Go: `1m30s`, `500ms`, `0`), or as lastcall does (`90`, `1.5s`). */
export function gatewayDurationArg(value: string): number {
  const ms = goDurationMs(value.trim());
  if (ms === undefined) return durationArg(value);
  if (ms > MAX_DURATION_MS) {
    throw new InvalidArgumentError(
      `Expected at most ${MAX_DURATION_TEXT}: a timer cannot hold more.`,
    );
  }
  return ms;
}

/** A default as Envoy Gateway's docs write it, in seconds: `610s`, `60s`. */
const seconds = (ms: number) => `${ms / 1000}s`;

/** Said after each command's `--help`: the durations Envoy Gateway writes are taken too. */
const GO_DURATIONS_HELP =
  "\nDurations are also taken as Envoy Gateway writes them (Go): --drain-timeout=60s, 1m30s, 1h0m0s, 0.";

/** Adds `gateway shutdown-manager` and `gateway shutdown`; `run` resolves each command's exit code. */
export function addGatewayCommands(program: Command, run: (code: Promise<number>) => void): void {
  const gateway = program.command("gateway")
    .description(
      "Envoy Gateway-compatible shutdown-manager pair (its flags, ports, paths and ready file); as envoy-gateway, `envoy` means `gateway`",
    )
    .exitOverride();

  gateway.command("shutdown-manager")
    .description(
      "Envoy Gateway-compatible: serve GET /healthz and GET /shutdown/ready on :19002 (blocks until the drain is finished; 500 after --ready-timeout)",
    )
    .addOption(
      option("--ready-timeout <duration>", "answer 500 when the drain has not finished after")
        .default(GATEWAY_DEFAULTS.readyTimeoutMs, seconds(GATEWAY_DEFAULTS.readyTimeoutMs))
        .argParser(gatewayDurationArg),
    )
    .addOption(
      option("--serve-port <port>", "port of /healthz and /shutdown/ready (fixed in Envoy Gateway)")
        .default(GATEWAY.servePort).argParser(integerArg(0, 65535)),
    )
    .addOption(
      option(
        "--ready-file <path>",
        "file written by gateway shutdown when drained (fixed in Envoy Gateway)",
      ).default(GATEWAY.readyFile),
    )
    .addHelpText("after", GO_DURATIONS_HELP)
    .exitOverride()
    .action((o) =>
      run((async () => {
        const server = await gatewayShutdownManager({
          readyTimeoutMs: o.readyTimeout,
          servePort: o.servePort,
          readyFile: o.readyFile,
        }, createEventLog("json"));
        // SIGTERM, SIGINT, SIGQUIT: close and exit 0; SIGHUP, SIGUSR1, SIGUSR2: ignored.
        await nextSignal(STOP_SIGNALS);
        await server.close();
        return 0;
      })())
    );

  gateway.command("shutdown")
    .description(
      "Envoy Gateway-compatible preStop, in its order: drain listeners and fail Envoy's health check (after --health-check-failure-delay), start the drain of a lastcall run beside it, then check every --check-interval until --min-drain-duration has passed and open requests (or connections) are at most --exit-at-connections, or --drain-timeout; write the ready file",
    )
    .addOption(
      option(
        "--health-check-failure-delay <duration>",
        "drain listeners at once, fail the health check only after",
      ).default(0, "0s").argParser(gatewayDurationArg),
    )
    .addOption(
      option(
        "--drain-timeout <duration>",
        "end the drain then, whatever is still open (less than the pod's grace period)",
      ).default(GATEWAY_DEFAULTS.drainTimeoutMs, seconds(GATEWAY_DEFAULTS.drainTimeoutMs))
        .argParser(gatewayDurationArg),
    )
    .addOption(
      option(
        "--min-drain-duration <duration>",
        "never end the drain before (endpoint deprogramming)",
      ).default(GATEWAY_DEFAULTS.minDrainDurationMs, seconds(GATEWAY_DEFAULTS.minDrainDurationMs))
        .argParser(gatewayDurationArg),
    )
    .addOption(
      option("--exit-at-connections <n>", "after the minimum, drained at or below this count")
        .default(0).argParser(integerArg(0, 1_000_000)),
    )
    .addOption(
      option(
        "--admin-address <address>",
        "Envoy admin: host:port, or a Unix socket path (fixed in Envoy Gateway)",
      ).default(GATEWAY.adminAddress),
    )
    .addOption(
      option("--check-interval <duration>", "time between checks (1s in Envoy Gateway)").default(
        1000,
        "1s",
      ).argParser(gatewayDurationArg),
    )
    .addOption(
      option("--ready-file <path>", "file to write when drained (fixed in Envoy Gateway)").default(
        GATEWAY.readyFile,
      ),
    )
    .addOption(
      option(
        "--status-url <url>",
        'a lastcall run beside Envoy: its drain starts with this one ("" for none)',
      ).default(DEFAULT_STATUS_BASE).argParser(optionalStatusUrlArg),
    )
    .addHelpText("after", GO_DURATIONS_HELP)
    .exitOverride()
    .action((o) =>
      run(gatewayShutdown({
        healthCheckFailureDelayMs: o.healthCheckFailureDelay,
        drainTimeoutMs: o.drainTimeout,
        minDrainDurationMs: o.minDrainDuration,
        exitAtConnections: o.exitAtConnections,
        adminAddress: o.adminAddress,
        checkIntervalMs: o.checkInterval,
        readyFile: o.readyFile,
        statusUrl: o.statusUrl || undefined,
      }, createEventLog("json")))
    );
}
