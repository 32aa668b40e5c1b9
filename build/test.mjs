#!/usr/bin/env node
// `npm test`: set up a fresh clone, then run every test with vitest. Prints vitest's dots,
// the failures in full, and one closing line `tests: N passed, N failed, N skipped`.
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { setup } from "./setup.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const { envoy } = await setup();
const report = join(root, ".cache", "vitest-report.json");
const result = spawnSync(process.execPath, [
  join(root, "node_modules/vitest/vitest.mjs"),
  "run",
  "--reporter=dot",
  "--reporter=json",
  `--outputFile.json=${report}`,
  ...process.argv.slice(2),
], { cwd: root, stdio: "inherit", env: { ...process.env, ENVOY_BIN: envoy } });

let summary = "";
try {
  const r = JSON.parse(readFileSync(report, "utf8"));
  const skipped = (r.numPendingTests ?? 0) + (r.numTodoTests ?? 0);
  // A file whose setup failed has no failed test (its tests count as skipped): count it failed,
  // so the closing line never says 0 failed for a run that failed.
  const brokenFiles = (r.testResults ?? []).filter((f) =>
    f.status === "failed" && !(f.assertionResults ?? []).some((a) =>
      a.status === "failed"
    )
  ).length;
  summary = `tests: ${r.numPassedTests} passed, ${
    r.numFailedTests + brokenFiles
  } failed, ${skipped} skipped`;
  // A skipped test says why in its name (e.g. "container tests: needs podman: install with …"):
  // never skip silently.
  const skippedNames = (r.testResults ?? []).flatMap((f) =>
    (f.assertionResults ?? []).filter((a) =>
      a.status === "skipped" || a.status === "pending" || a.status === "todo"
    ).map((a) => a.fullName)
  );
  for (const name of skippedNames) summary += `\nskipped: ${name}`;
} catch {
  summary = "tests: no report written (vitest failed to start)";
}
console.log(summary);
process.exit(result.status ?? 1);
