// The agent's source type-checks under Deno 2 as it is (the run under Deno is in smoke.test.ts).
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { expect, it } from "vitest";
import { resolveDeno } from "../../build/deno.mjs";
import { root } from "../support/paths.ts";

it("deno check passes on the entry point", async () => {
  const result = await promisify(execFile)(resolveDeno(), ["check", "--quiet", "agent/main.ts"], {
    cwd: root,
  })
    .then(
      () => ({ code: 0, stderr: "" }),
      (error) => ({ code: error.code, stderr: String(error.stderr) }),
    );
  expect(result).toEqual({ code: 0, stderr: "" });
}, 180_000); // the first run installs the pinned Deno and type-checks from a cold cache
