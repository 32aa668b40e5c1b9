// Envoy arguments after `--` that lastcall sets itself (envoy/args.ts) or that make Envoy do
// something else than serve: passed through, Envoy would refuse the duplicate (and print its
// usage) or exit at once, and lastcall would restart it until its budget is spent.
import { StartError } from "../lib/errors.ts";

/** What a refused Envoy argument means, and the lastcall way to get it. */
const OWN: ReadonlyArray<{ flags: readonly string[]; instead: string }> = [
  { flags: ["-c", "--config-path", "--config-yaml"], instead: "use lastcall's --config" },
  { flags: ["--concurrency"], instead: "use lastcall's --concurrency" },
  { flags: ["--drain-time-s"], instead: "use lastcall's --drain-time" },
  {
    flags: ["--parent-shutdown-time-s"],
    instead:
      "lastcall derives it from its own limit for the old Envoy of a reload (use lastcall's --parent-shutdown)",
  },
  { flags: ["--disable-hot-restart"], instead: "use lastcall's --no-hot-restart" },
  {
    flags: ["--admin-address-path"],
    instead: "lastcall sets it to find Envoy's admin (use --admin-port or --admin-socket)",
  },
  { flags: ["--drain-strategy"], instead: "lastcall sets it (immediate)" },
  {
    flags: ["--use-dynamic-base-id", "--base-id-path", "--base-id", "--restart-epoch"],
    instead: "lastcall runs Envoy's hot restart itself (use --no-hot-restart to do without)",
  },
  {
    flags: ["--mode"],
    instead:
      "lastcall runs Envoy to serve (to check a config: lastcall bootstrap, then envoy --mode validate)",
  },
  {
    flags: ["-h", "--help", "--version", "--hot-restart-version"],
    instead: "it makes Envoy exit at once (run envoy directly for it)",
  },
];

const INSTEAD = new Map(
  OWN.flatMap(({ flags, instead }) => flags.map((flag) => [flag, instead] as const)),
);

/**
 * Finds the first Envoy argument that clashes with what lastcall passes Envoy, in either
 * spelling (`--concurrency 4`, `--concurrency=4`).
 *
 * @example
 * ```ts
 * envoyArgClash(["-l", "debug", "--concurrency=4"]);
 * // "Envoy argument --concurrency=4 clashes with lastcall's own: use lastcall's --concurrency"
 * envoyArgClash(["-l", "debug"]); // undefined
 * ```
 * @returns One line naming the argument and what to use instead, or undefined when none clashes
 */
export function envoyArgClash(args: readonly string[]): string | undefined {
  for (const arg of args) {
    const flag = arg.startsWith("-") ? arg.split("=", 1)[0] : undefined;
    const instead = flag === undefined ? undefined : INSTEAD.get(flag);
    if (instead) return `Envoy argument ${arg} clashes with lastcall's own: ${instead}`;
  }
  return undefined;
}

/**
 * Refuses Envoy arguments that clash with lastcall's own, at start.
 *
 * @example
 * ```ts
 * refuseEnvoyArgClash(["--concurrency", "4"]); // throws StartError, exit 2
 * ```
 * @throws {StartError} with the line of {@linkcode envoyArgClash}
 */
export function refuseEnvoyArgClash(args: readonly string[]): void {
  const clash = envoyArgClash(args);
  if (clash) throw new StartError(clash);
}

/** Every Envoy flag {@linkcode envoyArgClash} refuses. */
export const CLASHING_ENVOY_FLAGS: readonly string[] = [...INSTEAD.keys()];
