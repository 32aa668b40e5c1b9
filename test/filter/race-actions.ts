// The random actions the race property of races.test.ts draws: VMs' streams, reports and the
// agent's answers, some with a host call failed.
import fc from "fast-check";

/** A callback's first gauge read or report call that the host fails, if any. */
export type Fault = "proxy_get_metric" | "proxy_http_call" | undefined;
/** One step of a scenario: a VM's callback, or the agent's answer to (or failure of) a call. */
export type Action =
  | { t: "create"; vm: number; fault: Fault }
  | { t: "headers"; pick: number; excluded: boolean }
  | { t: "end"; pick: number; fault: Fault }
  | { t: "tick"; vm: number; fault: Fault }
  | { t: "answer"; pick: number; status: number; draining?: string; probe?: string; fault: Fault }
  | { t: "fail"; pick: number };

// One callback in ten or so has its first gauge read or its first report call failed by the host.
const FAULTS: Fault[] = [
  ...Array<Fault>(16).fill(undefined),
  "proxy_get_metric",
  "proxy_http_call",
];
const INVALID_PROBES = ["0", "-1", "01", "1.5", "9007199254740992", "", "x", " 5"];
const fault = fc.constantFrom(...FAULTS);
/** Any one action, weighted towards streams' creation and end. */
export const action: fc.Arbitrary<Action> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ t: fc.constant("create" as const), vm: fc.nat(3), fault }) },
  {
    weight: 2,
    arbitrary: fc.record({
      t: fc.constant("headers" as const),
      pick: fc.nat(),
      excluded: fc.boolean(),
    }),
  },
  { weight: 5, arbitrary: fc.record({ t: fc.constant("end" as const), pick: fc.nat(), fault }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant("tick" as const), vm: fc.nat(3), fault }) },
  {
    weight: 3,
    arbitrary: fc.record({
      t: fc.constant("answer" as const),
      pick: fc.nat(),
      status: fc.constantFrom(200, 200, 200, 503),
      draining: fc.constantFrom(undefined, "0", "1", "1", "true"),
      probe: fc.constantFrom(undefined, undefined, "valid", "valid", ...INVALID_PROBES),
      fault,
    }),
  },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("fail" as const), pick: fc.nat() }) },
);
