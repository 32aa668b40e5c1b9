import { writeLog } from "../runtime/process.ts";

/** How lastcall's own events are written: one JSON object per line, or `key=value` text. */
export type LogFormat = "json" | "text";

/** A structured event logger: `log("ready", { epoch: 0 })`. */
export type EventLog = (event: string, fields?: Record<string, unknown>) => void;

/**
 * Creates the event logger. Each event is one line with a timestamp and an `event` name, so
 * operators (and the tests) can follow a termination step by step.
 *
 * @example
 * ```ts
 * const log = createEventLog("json");
 * log("start", { pid: 42 }); // {"ts":"…","event":"start","pid":42}
 * ```
 */
export function createEventLog(
  format: LogFormat = "json",
  write: (line: string) => void = writeLog,
): EventLog {
  return function logEvent(event, fields = {}) {
    const ts = new Date().toISOString();
    if (format === "json") {
      write(JSON.stringify({ ts, event, ...fields }));
      return;
    }
    const pairs = Object.entries(fields).map(([k, v]) =>
      `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`
    );
    write([ts, event, ...pairs].join(" "));
  };
}
