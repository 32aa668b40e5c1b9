import { describe, expect, it } from "vitest";
import { flagValue, handlerArgv, parseAnyDuration, preStopOf } from "../../agent/k8s/containers.ts";

describe("parseAnyDuration: Go, protobuf JSON and lastcall spellings", () => {
  it.each([
    ["5s", 5000],
    ["0.5s", 500],
    ["1m30s", 90_000],
    ["1h2m3s", 3_723_000],
    ["250ms", 250],
    ["1500us", 1.5],
    ["30", 30_000],
    ["0", 0],
  ])("%j is %d ms", (text, ms) => {
    expect(parseAnyDuration(text)).toBe(ms);
  });

  it.each(["", "soon", "5 s s", "-1s", "1d"])("refuses %j", (text) => {
    expect(() => parseAnyDuration(text)).toThrow(RangeError);
  });
});

describe("flagValue", () => {
  it.each([
    [["run", "--grace", "30s"], "30s"],
    [["run", "--grace=45s"], "45s"],
    [["run", "--grace", "30s", "--grace=45s"], "45s"],
    [["run", "--grace"], undefined],
    [["exec", "--", "app", "--grace", "1s"], undefined],
    [["run", "--graceful", "1s"], undefined],
  ])("%j", (args, value) => {
    expect(flagValue(args, "--grace")).toBe(value);
  });
});

describe("preStopOf", () => {
  const hook = (preStop: unknown) => ({ name: "app", lifecycle: { preStop } });
  it.each([
    ["no lifecycle", { name: "app" }, { kind: "none" }],
    ["a sleep action", hook({ sleep: { seconds: 10 } }), { kind: "sleep", ms: 10_000 }],
    ["exec sleep", hook({ exec: { command: ["sleep", "15"] } }), { kind: "sleep", ms: 15_000 }],
    [
      "sh -c with several sleeps",
      hook({ exec: { command: ["/bin/sh", "-c", "sleep 5 && nginx -s quit; sleep 2s"] } }),
      { kind: "sleep", ms: 7000 },
    ],
    ["a script", hook({ exec: { command: ["/stop.sh"] } }), {
      kind: "other",
      what: "exec /stop.sh",
    }],
    ["an HTTP call", hook({ httpGet: { path: "/shutdown", port: 8090 } }), {
      kind: "other",
      what: "GET /shutdown",
    }],
  ])("%s", (_, container, expected) => {
    expect(preStopOf(container)).toEqual(expected);
  });

  it.each([
    ["sleep 2 3", 5000],
    ["sleep 1e3", 1_000_000],
    ["sleep 0x10", 16_000],
    ["sleep .5", 500],
    ["sleep 1.5m", 90_000],
    ["sleep 1h 30m", 5_400_000],
    ["sleep 2d", 172_800_000],
    ["sleep +7", 7000],
    ["sleep 1m30s", 90_000],
    ["sleep 5; sleep 2 1", 8000],
  ])("exec %s: as GNU sleep reads it", (script, ms) => {
    expect(preStopOf(hook({ exec: { command: ["sh", "-c", script] } }))).toEqual({
      kind: "sleep",
      ms,
    });
  });

  it.each(["sleep infinity", "sleep $DELAY", "sleep"])("exec %s: not known", (script) => {
    expect(preStopOf(hook({ exec: { command: ["sh", "-c", script] } }))).toEqual({
      kind: "other",
      what: `exec ${script}`,
    });
  });

  it("splits sh -c scripts into words", () => {
    expect(
      handlerArgv({ exec: { command: ["bash", "-c", "contour envoy shutdown --check-delay 5s"] } }),
    ).toEqual(["contour", "envoy", "shutdown", "--check-delay", "5s"]);
  });
});
