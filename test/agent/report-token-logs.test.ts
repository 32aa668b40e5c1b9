// The report token stays secret at Envoy's default log level, and appears at `-l debug` where
// docs/operations.md says.
import { describe, expect, it } from "vitest";
import {
  agentSees,
  heldAcrossSigterm,
  reportToken,
  serving,
  upstreamForFile,
} from "../support/serving.ts";

const app = upstreamForFile();

describe.runIf(process.platform === "linux")("the report token in the logs", () => {
  it("at Envoy's default log level, neither lastcall nor Envoy prints it, through a drain", async () => {
    const { lc, port, status, envoyPid } = await serving(app.port, [], { envoyArgs: [] }); // no -l: Envoy's info
    const token = reportToken(envoyPid);
    expect(token).toMatch(/^[A-Za-z0-9_-]{43}$/);
    await heldAcrossSigterm(app, lc, port, status);
    await lc.exited;
    const output = lc.output();
    expect(output).toContain("][info][main]"); // Envoy's own lines are in it
    expect(output).not.toContain(token);
  });

  it("at -l debug, Envoy prints it in the plugin configuration and in each report's headers", async () => {
    const { lc, status, envoyPid } = await serving(app.port, [], { envoyArgs: ["-l", "debug"] });
    const token = reportToken(envoyPid);
    await agentSees(status, 0);
    await lc.stop();
    const lines = lc.output().split("\n").filter((l) => l.includes(token));
    expect(lines.some((l) => l.startsWith(`'x-lastcall-token', '${token}'`))).toBe(true);
    expect(lines.some((l) => /\]\[debug\]\[(config|wasm)\]/.test(l))).toBe(true);
  });
});
