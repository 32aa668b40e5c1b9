// Each test file writes its temporary files in a folder of its own, removed after its tests (see
// temp.ts).
import { appendFileSync, readdirSync } from "node:fs";
import { relative } from "node:path";
import { afterAll } from "vitest";
import { stopAllLastcalls } from "./lastcall.ts";
import { removeTempDirs, useFileTempDir } from "./temp.ts";

const dir = useFileTempDir();

// deno-lint-ignore no-empty-pattern -- vitest passes the suite second, after an unused context
afterAll(async ({}, suite) => {
  await stopAllLastcalls();
  const report = process.env.LASTCALL_TEST_TMP_REPORT;
  if (report) {
    const file = relative(process.cwd(), suite.file?.filepath ?? "?");
    appendFileSync(report, `${JSON.stringify({ file, left: readdirSync(dir).sort() })}\n`);
  }
  removeTempDirs();
});
