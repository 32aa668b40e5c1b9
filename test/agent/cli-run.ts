// How the command-line tests (cli.test.ts, cli-config.test.ts) run lastcall and read its refusals.
import { inboundConfig, runLastcall, writeConfig } from "../support/lastcall.ts";

/** Runs `lastcall <args>` to its end with `env` added. */
export const lastcall = (args: string[], env: Record<string, string> = {}) =>
  runLastcall(args, "", env);

/** `run` with ports 0, so nothing collides. */
export const run = (...args: string[]) => [
  "run",
  "--admin-port",
  "0",
  "--status-port",
  "0",
  ...args,
];

/** A config lastcall can run (its listener's upstream port 9 is never reached). */
export const someConfig = () => writeConfig(inboundConfig({ upstreamPort: 9 }));

/** The stderr lines that say what is wrong (commander adds a hint line after its own errors). */
export const errorLines = (stderr: string) =>
  stderr.split("\n").filter((l) => l && l !== "(run with --help for usage)");
