// The effective bootstrap file, written and validated by the real Envoy.
import { mkdtempSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { prepareBootstrap } from "../../agent/supervise/bootstrap-file.ts";
import type { RunOptions } from "../../agent/options.ts";

describe("prepareBootstrap", () => {
  it("writes JSON, so a quoted 'n' stays a string where Envoy's YAML 1.1 would read false", async () => {
    const dir = mkdtempSync(join(tmpdir(), "lastcall-bootstrap-"));
    const config = join(dir, "envoy.yaml");
    writeFileSync(config, 'node:\n  id: "n"\n  cluster: "y"\nstatic_resources: {}\n');
    const options = {
      config,
      adminPort: 0,
      statusAddress: "127.0.0.1",
      heartbeatMs: 1000,
      excludePath: [],
    } as unknown as RunOptions;
    const prepared = await prepareBootstrap(process.env.ENVOY_BIN!, options, {
      runDir: dir,
      name: "envoy-g1-epoch0",
      epoch: 0,
      instance: "i",
      statusPort: 15020,
      reportToken: "secret",
    });
    expect(prepared.path).toBe(join(dir, "envoy-g1-epoch0.json"));
    const written = JSON.parse(readFileSync(prepared.path, "utf8"));
    expect(written.node).toEqual({ id: "n", cluster: "y" });
    expect(statSync(prepared.path).mode & 0o077).toBe(0); // it may hold the report token
  });
});
