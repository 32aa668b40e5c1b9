// Each test file writes its temporary files in a folder of its own (test/support/temp.ts),
// removed after its tests, once every lastcall it started is stopped (a lastcall killed by
// SIGKILL leaves its run folder there).
import { afterAll } from "vitest";
import { stopAllLastcalls } from "./lastcall.ts";
import { removeTempDirs, useFileTempDir } from "./temp.ts";

useFileTempDir();

afterAll(async () => {
  await stopAllLastcalls();
  removeTempDirs();
});
