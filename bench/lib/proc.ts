// What the kernel says about a process: CPU time, memory, children, whether it is gone. Linux
// /proc only (the benchmark machine), read synchronously so a poll loop stays cheap.
import { readdirSync, readFileSync, readlinkSync } from "node:fs";

/** Clock ticks per second of /proc/<pid>/stat (USER_HZ; 100 on every Linux the benchmark targets). */
export const CLOCK_TICKS = 100;

function read(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
}

// Fields after the command name (which may hold spaces and parentheses), 1-based as in proc(5).
function statFields(text: string): string[] {
  return ["", "", "", ...text.slice(text.lastIndexOf(")") + 2).trim().split(" ")];
}

/** User + system CPU seconds of a process (all threads), or of one thread with `tid`. */
export function cpuSeconds(pid: number, tid?: number): number {
  const text = read(tid === undefined ? `/proc/${pid}/stat` : `/proc/${pid}/task/${tid}/stat`);
  if (!text) return Number.NaN;
  const fields = statFields(text);
  return (Number(fields[14]) + Number(fields[15])) / CLOCK_TICKS;
}

/** Whether the process has exited (absent, or a zombie not yet reaped). */
export function isGone(pid: number): boolean {
  const text = read(`/proc/${pid}/stat`);
  if (!text) return true;
  const state = statFields(text)[3];
  return state === "Z" || state === "X";
}

/** Memory of a process in bytes, from /proc/<pid>/status (0 when absent). */
export interface Memory {
  /** Resident set size now. */
  rss: number;
  /** Peak resident set size ("high water mark"). */
  peak: number;
  /** Resident anonymous memory (heaps, stacks). */
  anon: number;
  /** Resident file-backed memory (the executable's and libraries' pages). */
  file: number;
}

/** Reads a process's memory; zeros when it is gone. */
export function memory(pid: number): Memory {
  const text = read(`/proc/${pid}/status`) ?? "";
  const kb = (name: string) =>
    Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(text)?.[1] ?? 0) * 1024;
  return { rss: kb("VmRSS"), peak: kb("VmHWM"), anon: kb("RssAnon"), file: kb("RssFile") };
}

/** Direct children of a process (every thread's children). */
export function children(pid: number): number[] {
  const out: number[] = [];
  let tasks: string[] = [];
  try {
    tasks = readdirSync(`/proc/${pid}/task`);
  } catch {
    return out;
  }
  for (const tid of tasks) {
    for (const child of (read(`/proc/${pid}/task/${tid}/children`) ?? "").trim().split(" ")) {
      if (child) out.push(Number(child));
    }
  }
  return out;
}

/** The executable of a process, or "" when it is gone. */
export function executable(pid: number): string {
  try {
    return readlinkSync(`/proc/${pid}/exe`);
  } catch {
    return "";
  }
}

/** The command line of a process, split at NULs. */
export function commandLine(pid: number): string[] {
  return (read(`/proc/${pid}/cmdline`) ?? "").split("\0").filter(Boolean);
}

/** CPU time of one thread in seconds, from /proc/<pid>/task/<tid>/schedstat (nanosecond resolution). */
export function threadCpuSeconds(pid: number, tid = pid): number {
  const text = read(`/proc/${pid}/task/${tid}/schedstat`);
  return text ? Number(text.split(" ")[0]) / 1e9 : Number.NaN;
}

/**
 * CPU time of a whole process in seconds, summed over its threads' schedstat (nanosecond
 * resolution, where /proc/<pid>/stat counts 10 ms ticks); NaN when it is gone.
 */
export function processCpuSeconds(pid: number): number {
  let tasks: string[];
  try {
    tasks = readdirSync(`/proc/${pid}/task`);
  } catch {
    return Number.NaN;
  }
  let total = 0;
  for (const tid of tasks) {
    const seconds = threadCpuSeconds(pid, Number(tid));
    if (Number.isFinite(seconds)) total += seconds; // a thread that ended in between
  }
  return total;
}

/** When a process started (clock ticks since boot), to tell it from a later one with its id; NaN when gone. */
export function startTime(pid: number): number {
  const text = read(`/proc/${pid}/stat`);
  return text ? Number(statFields(text)[22]) : Number.NaN;
}

/**
 * Sends `signal` to `pid` only if it is still the process that started at `started` (see
 * {@linkcode startTime}): process ids are reused, and a stale id may name someone else's process.
 */
export function signalIfSame(pid: number, started: number, signal: NodeJS.Signals): void {
  if (!Number.isFinite(started) || startTime(pid) !== started || isGone(pid)) return;
  try {
    process.kill(pid, signal);
  } catch {
    // gone in between
  }
}

/** Whether the process that started at `started` has exited (its id gone, a zombie, or reused). */
export function exitedSince(pid: number, started: number): boolean {
  return isGone(pid) || startTime(pid) !== started;
}
