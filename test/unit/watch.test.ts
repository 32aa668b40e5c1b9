// Watched files (`--watch`): a burst of changes is one call, naming the files that changed only.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { watchFiles } from "../../agent/lib/watch.ts";

describe("watchFiles", () => {
  let dir = "";
  let stop = () => {};
  afterEach(() => {
    stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it("names the file whose content changed, not every watched one", async () => {
    dir = mkdtempSync(join(tmpdir(), "lastcall-watch-"));
    const [config, cert] = [join(dir, "envoy.yaml"), join(dir, "tls.crt")];
    writeFileSync(config, "a");
    writeFileSync(cert, "b");
    const calls: string[][] = [];
    let called!: () => void;
    const first = new Promise<void>((resolve) => (called = resolve));
    stop = await watchFiles([config, cert], (paths) => {
      calls.push(paths);
      called();
    }, { settleMs: 50 });
    writeFileSync(config, "a"); // the same content: no change
    writeFileSync(cert, "c");
    await first;
    expect(calls).toEqual([[cert]]);
  });
});
