// Entry point: parse the command line, run the command, map the result to an exit code.
// Loading runtime/process.ts first gives every signal a listener (docs/architecture.md).
import {
  commandArguments,
  environment,
  exitWith,
  invokedAs,
  nextSignal,
  STOP_SIGNALS,
  writeErr,
} from "./runtime/process.ts";
import { Command, CommanderError } from "commander";
import { printBootstrap } from "./commands/bootstrap.ts";
import { resolveRunOptions, runCommand, UsageError } from "./commands/run.ts";
import { shutdownEnvoy, shutdownManager } from "./commands/contour.ts";
import { addGatewayCommands, asInvoked } from "./commands/gateway.ts";
import { execApp } from "./commands/exec.ts";
import { waitReady } from "./commands/wait.ts";
import {
  DEFAULT_STATUS_BASE,
  optionalStatusUrlArg,
  statusCommand,
  statusUrlOption,
} from "./commands/status.ts";
import { addKubernetesCommands } from "./commands/k8s.ts";
import { CONTOUR_DEFAULTS } from "./k8s/proxy-contour.ts";
import { formatDuration } from "./lib/duration.ts";
import { StartError } from "./lib/errors.ts";
import { createEventLog } from "./lib/log.ts";
import {
  durationArg,
  integerArg,
  listArg,
  option,
  runOptionList,
  strictBooleanEnvironment,
  VALUE_SYNTAX_HELP,
} from "./options.ts";
import { VERSION } from "./version.ts";

/** Builds the command-line program; `run` resolves each command's exit code. */
export function createProgram(run: (code: Promise<number>) => void): Command {
  const program = new Command("lastcall")
    .description(
      "Sidecar lifecycle agent for Envoy: supervise, tell readiness, drain to exactly zero in flight",
    )
    .version(VERSION, "-v, --version")
    .exitOverride()
    .enablePositionalOptions()
    .configureOutput({ writeErr: (s) => writeErr(s.trimEnd()) })
    .addHelpText("afterAll", VALUE_SYNTAX_HELP);

  const runCmd = program.command("run")
    .description("start Envoy with the in-flight filter, serve the status port, drain on SIGTERM")
    .argument("[envoy-args...]", "extra Envoy arguments, after --")
    .exitOverride();
  for (const opt of runOptionList()) runCmd.addOption(opt);
  runCmd.action((envoyArgs: string[], _opts, command: Command) =>
    run(runCommand(resolveRunOptions(command, envoyArgs)))
  );

  program.command("wait")
    .description("exit 0 once the proxy is ready; exit 1 with the last reason after --timeout")
    .addOption(
      option("--timeout <duration>", "give up after").default(60_000, "60s").argParser(durationArg),
    )
    .addOption(statusUrlOption())
    .exitOverride()
    .action((o) => run(waitReady({ statusUrl: o.statusUrl, timeoutMs: o.timeout })));

  program.command("status")
    .description(
      "print what a running lastcall is doing: phase, Envoy epoch, requests in flight; during a drain, what it waits for (oldest first) and the time left. Exit 1 when it does not answer",
    )
    .addOption(statusUrlOption())
    .addOption(option("--json", "print GET /v1/state as lastcall answered it: one line of JSON"))
    .addOption(
      option("--timeout <duration>", "give up on an answer after").default(2000, "2s").argParser(
        durationArg,
      ),
    )
    .exitOverride()
    .action((o) =>
      run(statusCommand({ statusUrl: o.statusUrl, json: o.json === true, timeoutMs: o.timeout }))
    );

  program.command("exec")
    .description(
      "wait for readiness, run the app, then ask the agent to quit and exit with the app's status",
    )
    .argument("<command...>", "the app and its arguments, after --")
    .addOption(
      option("--timeout <duration>", "readiness wait before giving up").default(60_000, "60s")
        .argParser(durationArg),
    )
    .addOption(statusUrlOption())
    .addOption(option("--no-quit", "leave the agent running when the app exits"))
    .passThroughOptions()
    .exitOverride()
    .action((command: string[], o) =>
      run(
        execApp(command, { statusUrl: o.statusUrl, timeoutMs: o.timeout, quit: o.quit !== false }),
      )
    );

  program.command("shutdown-manager")
    .description(
      "Contour-compatible: serve GET /healthz and GET /shutdown (blocks until the drain is finished)",
    )
    .addOption(
      option("--serve-port <port>", "port of /healthz and /shutdown").default(8090).argParser(
        integerArg(0, 65535),
      ),
    )
    .addOption(
      option("--ready-file <path>", "file written by lastcall shutdown when drained").default(
        "/admin/ok",
      ),
    )
    .exitOverride()
    .action((o) =>
      run((async () => {
        const log = createEventLog("json");
        const server = await shutdownManager(
          { servePort: o.servePort, readyFile: o.readyFile },
          log,
        );
        // SIGTERM, SIGINT, SIGQUIT: close and exit 0; SIGHUP, SIGUSR1, SIGUSR2: ignored.
        await nextSignal(STOP_SIGNALS);
        await server.close();
        return 0;
      })())
    );

  program.command("shutdown")
    .description(
      "Contour-compatible preStop, in Contour's order: wait --drain-delay (Envoy serves as before), fail Envoy's health check and start the drain of a lastcall run beside it, wait --check-delay, then check every --check-interval until open requests (or connections) are at most --min-open-connections; write the ready file",
    )
    .addOption(
      option(
        "--admin-address <address>",
        "Envoy admin: a Unix socket path (as Contour), or a host with --admin-port",
      ).default("/admin/admin.sock"),
    )
    .addOption(
      option(
        "--admin-port <port>",
        "Envoy admin port, only with a host --admin-address (deprecated in Contour)",
      ).default(9001).argParser(integerArg(1, 65535)),
    )
    .addOption(
      option("--check-interval <duration>", "time between checks").default(
        CONTOUR_DEFAULTS.checkIntervalMs,
        formatDuration(CONTOUR_DEFAULTS.checkIntervalMs),
      ).argParser(durationArg),
    )
    .addOption(
      option(
        "--check-delay <duration>",
        "wait after failing the health check, before the first check",
      ).default(CONTOUR_DEFAULTS.checkDelayMs, "0s").argParser(durationArg),
    )
    .addOption(
      option(
        "--drain-delay <duration>",
        "wait first, before failing the health check (Envoy serves as before meanwhile)",
      ).default(CONTOUR_DEFAULTS.drainDelayMs, "0s").argParser(durationArg),
    )
    .addOption(
      option("--min-open-connections <n>", "drained at or below this count").default(0).argParser(
        integerArg(0, 1_000_000),
      ),
    )
    .addOption(option("--ready-file <path>", "file to write when drained").default("/admin/ok"))
    .addOption(
      option(
        "--status-url <url>",
        'a lastcall run beside Envoy: its drain starts when the health check is failed ("" for none)',
      ).default(DEFAULT_STATUS_BASE).argParser(optionalStatusUrlArg),
    )
    .exitOverride()
    .action((o) =>
      run(shutdownEnvoy({
        adminAddress: o.adminAddress,
        adminPort: o.adminPort,
        checkIntervalMs: o.checkInterval,
        checkDelayMs: o.checkDelay,
        drainDelayMs: o.drainDelay,
        minOpenConnections: o.minOpenConnections,
        readyFile: o.readyFile,
        statusUrl: o.statusUrl || undefined,
      }, createEventLog("json")))
    );

  program.command("bootstrap")
    .description(
      "print the effective Envoy bootstrap lastcall derives from a config (what `run` starts as epoch 0, less what belongs to one run: the filter's report token and the overload manager's idle-connection pressure file in its run folder)",
    )
    .addOption(
      option("-c, --config <file>", "the Envoy config (YAML or JSON)").makeOptionMandatory(),
    )
    .addOption(
      option("--admin-port <port>", "Envoy admin port").default(15000).argParser(
        integerArg(0, 65535),
      ),
    )
    .addOption(
      option("--status-port <port>", "status server port").default(15020).argParser(
        integerArg(0, 65535),
      ),
    )
    .addOption(option("--status-address <address>", "status server address").default("127.0.0.1"))
    .addOption(option("--no-filter", "do not insert the in-flight filter"))
    .addOption(
      option(
        "--filter-wasm <path>",
        "reference this filter module file (default: the shipped module, inline)",
      ),
    )
    .addOption(
      option("--heartbeat <duration>", "filter heartbeat period").default(1000, "1s").argParser(
        durationArg,
      ),
    )
    .addOption(
      option("--exclude-path <path>", "request path not counted (repeatable or comma-separated)")
        .default([]).argParser(listArg),
    )
    .addOption(
      option(
        "--holder-paths",
        "name the method and path of the requests a drain waits for (costs two header reads per request)",
      ),
    )
    .exitOverride()
    .action((o) =>
      // Writes nothing: the filter module is carried inline unless --filter-wasm names a file.
      run(
        printBootstrap({
          ...o,
          filter: o.filter !== false,
          heartbeatMs: o.heartbeat,
          holderPaths: o.holderPaths === true,
        }),
      )
    );
  addGatewayCommands(program, run);
  addKubernetesCommands(program, run);
  // After every option exists, so no command is left with commander's lax boolean variables.
  for (const command of program.commands) strictBooleanEnvironment(command, environment);
  return program;
}

/** Runs lastcall with the process's arguments and exits with the command's code. */
export async function main(
  argv: string[] = asInvoked(commandArguments(), invokedAs()),
): Promise<void> {
  await exitWith(await commandStatus(argv));
}

/** Runs the command `argv` names; returns its exit code, having printed why when it failed. */
async function commandStatus(argv: string[]): Promise<number> {
  let pending: Promise<number> | undefined;
  const program = createProgram((code) => (pending = code));
  try {
    await program.parseAsync(argv, { from: "user" });
    return pending ? await pending : 0;
  } catch (error) {
    // --help and --version end here with code 0; usage errors were printed by commander.
    if (error instanceof CommanderError) return error.exitCode === 0 ? 0 : 2;
    if (error instanceof UsageError || error instanceof RangeError || error instanceof StartError) {
      writeErr(`lastcall: ${error.message}`);
      for (const line of (error as StartError).details ?? []) writeErr(`  ${line}`);
      return 2;
    }
    writeErr(`lastcall: ${(error as Error).stack ?? error}`);
    return 1;
  }
}

main();
