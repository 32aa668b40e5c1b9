// The native sidecar's preStop hook: how `inject` writes it, and how lastcall knows it (`check`,
// and an app's hook waiting for the drain it starts). Why a signal: docs/kubernetes.md.
import { isProgram, isShell } from "../k8s/containers.ts";

/** What the hook runs where lastcall is the container's PID 1: SIGUSR2, a drain in place. */
const SIGNAL_LASTCALL = "kill -USR2 1";

/**
 * The preStop command: SIGUSR2 to lastcall where it is the container's PID 1 (the image's
 * entrypoint), a shell's work at the pod's deletion instead of a Node start beside the next pod's;
 * `lastcall drain` where it is not (a PID namespace shared with the pod, an init in front of it).
 *
 * @param drainArgs Arguments of `lastcall drain` (`--status-url` for a port not the default)
 * @returns The command, for `lifecycle.preStop.exec.command`
 * @example
 * ```ts
 * drainHookCommand(); // ["sh", "-c", "read -r pid1 </proc/1/comm; if [ \"$pid1\" = lastcall ] …"]
 * ```
 */
export function drainHookCommand(drainArgs: readonly string[] = []): string[] {
  const drain = ["lastcall", "drain", ...drainArgs].join(" ");
  return [
    "sh",
    "-c",
    `read -r pid1 </proc/1/comm; if [ "$pid1" = lastcall ]; then ${SIGNAL_LASTCALL}; ` +
    `else exec ${drain}; fi`,
  ];
}

/**
 * Whether `argv` (a preStop's command, or a running process's) asks lastcall to drain:
 * `lastcall drain`, or a shell that sends lastcall SIGUSR2 as {@linkcode drainHookCommand} does.
 *
 * @example
 * ```ts
 * isDrainHook(["lastcall", "drain"]); // true
 * isDrainHook(drainHookCommand()); // true
 * isDrainHook(["sh", "-c", "sleep 5"]); // false
 * ```
 */
export function isDrainHook(argv: readonly string[]): boolean {
  if (isProgram(argv[0], "lastcall")) return argv[1] === "drain";
  return isShell(argv[0]) && argv[1] === "-c" && (argv[2] ?? "").includes(SIGNAL_LASTCALL);
}
