// Load generators: Debian's wrk (HTTP/1.1, saturating) and h2load (HTTP/2 h2c prior knowledge, or
// HTTP/1.1 with --h1; also at a fixed rate with --rps). Loopback targets only.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { quantile } from "./stats.ts";

/** What one load run measured. */
export interface LoadResult {
  /** Completed requests per second. */
  rps: number;
  requests: number;
  /** Non-2xx answers and socket errors. */
  errors: number;
  p50_us: number;
  p99_us: number;
}

// wrk's Lua `done` hook: the exact percentiles (µs) and counts as one JSON line.
const WRK_SCRIPT = `
done = function(summary, latency, requests)
  local errors = summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.status + summary.errors.timeout
  io.write(string.format('{"requests":%d,"duration_us":%d,"errors":%d,"p50":%d,"p99":%d}\\n',
    summary.requests, summary.duration, errors, latency:percentile(50), latency:percentile(99)))
end
`;

/** Saturating HTTP/1.1 load with wrk: `connections` keep-alive connections, one thread. */
export function wrk(
  url: string,
  options: { connections: number; seconds: number; threads?: number },
): LoadResult {
  const dir = mkdtempSync(join(tmpdir(), "lcperf-wrk-"));
  try {
    const script = join(dir, "done.lua");
    writeFileSync(script, WRK_SCRIPT);
    const result = spawnSync("wrk", [
      "-t",
      String(options.threads ?? 1),
      "-c",
      String(options.connections),
      "-d",
      `${options.seconds}s`,
      "-s",
      script,
      url,
    ], { encoding: "utf8" });
    const line = result.stdout.split("\n").find((l) => l.startsWith("{"));
    if (result.status !== 0 || !line) {
      throw new Error(`wrk failed: ${result.stdout}${result.stderr}`);
    }
    const r = JSON.parse(line) as {
      requests: number;
      duration_us: number;
      errors: number;
      p50: number;
      p99: number;
    };
    return {
      rps: r.requests / (r.duration_us / 1e6),
      requests: r.requests,
      errors: r.errors,
      p50_us: r.p50,
      p99_us: r.p99,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Options of {@linkcode h2load}. */
export interface H2loadOptions {
  /** Connections (clients). */
  clients: number;
  /** Concurrent streams per connection (HTTP/2). @default 1 */
  streams?: number;
  seconds: number;
  /** HTTP/1.1 instead of HTTP/2. @default false */
  h1?: boolean;
  /** Fixed request rate per client; omitted: as fast as possible. */
  rpsPerClient?: number;
}

/** h2load run; latency percentiles from its per-request log. */
export function h2load(url: string, options: H2loadOptions): LoadResult {
  const dir = mkdtempSync(join(tmpdir(), "lcperf-h2load-"));
  try {
    const log = join(dir, "requests.log");
    const args = [
      "-t",
      "1",
      "-c",
      String(options.clients),
      "-m",
      String(options.streams ?? 1),
      "-D",
      String(options.seconds),
      "--log-file",
      log,
    ];
    if (options.h1) args.push("--h1");
    if (options.rpsPerClient) args.push("--rps", String(options.rpsPerClient));
    const result = spawnSync("h2load", [...args, url], { encoding: "utf8", maxBuffer: 64 << 20 });
    if (result.status !== 0) throw new Error(`h2load failed: ${result.stdout}${result.stderr}`);
    const done =
      /requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored/
        .exec(result.stdout);
    const seconds = /finished in ([\d.]+)(m?s)/.exec(result.stdout);
    if (!done || !seconds) throw new Error(`Cannot read h2load's summary:\n${result.stdout}`);
    const elapsed = Number(seconds[1]) / (seconds[2] === "ms" ? 1000 : 1);
    const durations: number[] = [];
    for (const line of readFileSync(log, "utf8").split("\n")) {
      const fields = line.split("\t");
      if (fields.length >= 3) durations.push(Number(fields[2]));
    }
    const requests = Number(done[1]);
    return {
      rps: Number(done[2]) / elapsed,
      requests,
      errors: Number(done[3]) + Number(done[4]),
      p50_us: quantile(durations, 0.5),
      p99_us: quantile(durations, 0.99),
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
