// The `abort` the build names with `--use abort=abort_proc_exit`: log, then trap. Nothing in the
// filter is meant to reach it; it exists so the module imports no `env.abort` or WASI call.
import { LogLevel, proxy_log } from "./abi";

// @ts-ignore: decorator
@global
/** Logs a critical line naming the failed check, then traps. */
export function abort_proc_exit(message: string | null, fileName: string | null, line: u32, column: u32): void {
  const text = String.UTF8.encode("lastcall: filter aborted: " + (message !== null ? message : "") +
    " at " + (fileName !== null ? fileName : "") + ":" + line.toString() + ":" + column.toString());
  proxy_log(LogLevel.Critical, changetype<usize>(text), text.byteLength);
  unreachable();
}
