#!/usr/bin/env node
// `npm run bench`: set up a fresh clone, then run every benchmark under bench/ with vitest, one
// file at a time (they measure time on a shared CPU). Each benchmark writes its numbers to
// bench/results/*.json. Quiet on success (one closing line per results file); vitest's whole
// output on failure.
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { setup } from "./setup.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const { envoy } = await setup();
const result = spawnSync(process.execPath, [
  join(root, "node_modules/vitest/vitest.mjs"), "bench", "--run", "--no-file-parallelism", ...process.argv.slice(2),
], { cwd: root, encoding: "utf8", env: { ...process.env, ENVOY_BIN: envoy } });

if (result.status !== 0) {
  process.stderr.write(`${result.stdout ?? ""}${result.stderr ?? ""}`);
  console.error(`bench: failed (vitest exit ${result.status ?? result.signal})`);
  process.exit(result.status ?? 1);
}

const read = (name) => {
  try {
    return JSON.parse(readFileSync(join(root, "bench/results", name), "utf8"));
  } catch {
    return undefined;
  }
};
const cost = read("filter-cost.json");
if (cost) {
  const cells = cost.cells.map((c) => `${c.live} live ${c.lastcall_us_per_request} µs (SDK ${c.sdk_stock_us_per_request})`);
  console.log(`bench: filter cost per request: ${cells.join(", ")} -> bench/results/filter-cost.json`);
}
const push = read("inflight-push.json");
if (push) {
  const delays = push.push_delay.settings.map((s) => `median ${s.median_ms} ms, max ${s.max_ms} ms (zero-confirm ${s.zero_confirm_ms} ms)`);
  console.log(`bench: push delay ${delays.join("; ")}; ${push.steady_state.calls_per_request} report calls per request -> bench/results/inflight-push.json`);
}
