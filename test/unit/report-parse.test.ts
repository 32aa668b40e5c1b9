// A filter report as the status server reads it: every field checked, every refusal naming it.
import { describe, expect, it } from "vitest";
import { parseReport } from "../../agent/drain/in-flight.ts";

describe("parseReport", () => {
  it("reads a report", () => {
    const body = { instance: "42-1-0", epoch: 0, inflight: 1, draining: true, reason: "busy" };
    expect(parseReport(body)).toEqual(body);
  });

  it("reads a probe answer", () => {
    const body = {
      instance: "a",
      epoch: 1,
      inflight: 0,
      draining: true,
      reason: "probe",
      probe: 42,
    };
    expect(parseReport(body)).toEqual(body);
  });

  it("takes the largest exact counts and probe ids", () => {
    const max = Number.MAX_SAFE_INTEGER;
    const body = {
      instance: "a",
      epoch: max,
      inflight: max,
      draining: true,
      reason: "probe",
      probe: max,
    };
    expect(parseReport(body)).toEqual(body);
  });

  it("drops keys it does not know (an older filter's seq)", () => {
    expect(
      parseReport({
        instance: "a",
        epoch: 0,
        seq: 3,
        inflight: 0,
        draining: false,
        reason: "heartbeat",
        extra: {},
      }),
    )
      .toEqual({ instance: "a", epoch: 0, inflight: 0, draining: false, reason: "heartbeat" });
  });

  it("defaults draining to false (anything but true) and reason to unknown, and cuts a long reason", () => {
    expect(parseReport({ instance: "a", epoch: 0, inflight: 0 })).toEqual({
      instance: "a",
      epoch: 0,
      inflight: 0,
      draining: false,
      reason: "unknown",
    });
    expect(parseReport({ instance: "a", epoch: 0, inflight: 0, draining: "true", reason: 7 }))
      .toMatchObject({ draining: false, reason: "unknown" });
    expect(parseReport({ instance: "a", epoch: 0, inflight: 0, reason: "r".repeat(100) }).reason)
      .toBe("r".repeat(40));
  });

  it.each([
    [null, "Report must be a JSON object"],
    ["a", "Report must be a JSON object"],
    [{ epoch: 0, inflight: 0 }, "Report field instance is not a short string: undefined"],
    [{ instance: 1, epoch: 0, inflight: 0 }, "Report field instance is not a short string: 1"],
    [
      { instance: "x".repeat(201), epoch: 0, inflight: 0 },
      `Report field instance is not a short string: "${"x".repeat(39)}`,
    ],
    [{ instance: "a", inflight: 0 }, "Report field epoch is not a count: undefined"],
    [{ instance: "a", epoch: "0", inflight: 1 }, 'Report field epoch is not a count: "0"'],
    [{ instance: "a", epoch: -1, inflight: 1 }, "Report field epoch is not a count: -1"],
    [{ instance: "a", epoch: 0 }, "Report field inflight is not a count: undefined"],
    [{ instance: "a", epoch: 0, inflight: 1e300 }, "Report field inflight is not a count: 1e+300"],
    [
      { instance: "a", epoch: 0, inflight: 2 ** 53 },
      "Report field inflight is not a count: 9007199254740992",
    ],
    [{ instance: "a", epoch: 0, inflight: -1 }, "Report field inflight is not a count: -1"],
    [{ instance: "a", epoch: 0, inflight: 1.5 }, "Report field inflight is not a count: 1.5"],
    [{ instance: "a", epoch: 0, inflight: null }, "Report field inflight is not a count: null"],
    [
      { instance: "a", epoch: 0, inflight: 0, probe: "1" },
      'Report field probe is not a count: "1"',
    ],
    [{ instance: "a", epoch: 0, inflight: 0, probe: -1 }, "Report field probe is not a count: -1"],
    [
      { instance: "a", epoch: 0, inflight: 0, probe: 2.5 },
      "Report field probe is not a count: 2.5",
    ],
    [
      { instance: "a", epoch: 0, inflight: 0, probe: 2 ** 53 },
      "Report field probe is not a count: 9007199254740992",
    ],
    [
      { instance: "a", epoch: 0, inflight: 0, probe: null },
      "Report field probe is not a count: null",
    ],
  ])("refuses %j", (body, message) => {
    expect(() => parseReport(body)).toThrow(message);
  });
});
