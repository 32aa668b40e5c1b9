import { describe, expect, test } from "vitest";
import { ProxyWasmHost } from "../support/proxy-wasm-host.ts";
import { prng } from "./prng.ts";

const PREFIX = "lastcall: invalid plugin configuration: ";

function configure(configuration: string, rootId?: string) {
  const host = new ProxyWasmHost();
  const vm = host.createVm({ configuration, rootId });
  return { host, vm };
}

describe("plugin configuration", () => {
  test.each([
    [""],
    ["   \n"],
    ["{}"],
    ['{"agent_cluster":"","heartbeat_ms":0}'],
    ['{"agent_cluster":"lastcall_agent","agent_authority":"a.b","heartbeat_ms":250,"push_timeout_ms":1,"epoch":9007199254740991,"instance":"pod-\\u00e9\\"x\\"","exclude_paths":["/healthz","/x*"]}'],
    ['{"exclude_paths":[]}'],
    ['{"instance":"\\ud800"}'], // echoed verbatim: still valid JSON text
    ['{"heartbeat_ms":4294967295}'],
    ['{"token":""}'],
    ['{"token":"!~s3cr3t"}'],
    ['{"token":"\\u0041\\/b"}'], // escapes that unescape to visible ASCII
    [`{"token":"${"~".repeat(256)}"}`],
    ['{"gauge":"lastcall_inflight_tcp"}'],
    [`{"gauge":"${"a_0".repeat(21)}z"}`], // 64 characters
    ['{"holder_paths":true}'],
    ['{ "holder_paths" : false , "exclude_paths":["/a"]}'],
  ])("accepts %j", (configuration) => {
    const { host, vm } = configure(configuration);
    expect(vm.configured).toBe(true);
    expect(vm.failed).toBeUndefined();
    expect(host.logs).toEqual([]);
  });

  test.each([
    ["[]", "not a JSON object: []"],
    ['"x"', 'not a JSON object: "x"'],
    ["null", "not a JSON object: null"],
    ["{", "malformed JSON at byte 1: {"],
    ['{"heartbeat_ms":1000', "malformed JSON at byte 20"],
    ['{"heartbeat_ms":1000}x', "trailing data after the object: x"],
    ['{"heartbeat_ms":1000,}', "malformed JSON"],
    ['{"foo":1}', 'unknown key "foo": 1'],
    ['{"heartbeat_ms":-5}', '"heartbeat_ms" must be an integer from 0 to 4294967295: -5'],
    ['{"heartbeat_ms":1.5}', '"heartbeat_ms" must be an integer from 0 to 4294967295: 1.5'],
    ['{"heartbeat_ms":"1000"}', '"heartbeat_ms" must be an integer from 0 to 4294967295: "1000"'],
    [
      '{"heartbeat_ms":4294967296}',
      '"heartbeat_ms" must be an integer from 0 to 4294967295: 4294967296',
    ],
    ['{"heartbeat_ms":01}', '"heartbeat_ms" must be an integer from 0 to 4294967295: 01'],
    ['{"push_timeout_ms":0}', '"push_timeout_ms" must be an integer from 1 to 4294967295: 0'],
    ['{"epoch":true}', '"epoch" must be an integer from 0 to 9007199254740991: true'],
    [
      '{"epoch":99999999999999999999}',
      '"epoch" must be an integer from 0 to 9007199254740991: 99999999999999999999',
    ],
    ['{"agent_cluster":7}', '"agent_cluster" must be a string: 7'],
    ['{"agent_authority":""}', '"agent_authority" must not be empty: ""'],
    ['{"instance":null}', '"instance" must be a string: null'],
    ['{"exclude_paths":"/healthz"}', '"exclude_paths" must be an array of strings: "/healthz"'],
    ['{"exclude_paths":["/a",2]}', '"exclude_paths" must be an array of strings: ["/a",2]'],
    ['{"exclude_paths":[""]}', '"exclude_paths" entries must not be empty: [""]'],
    ['{"instance":"\\x"}', "malformed JSON"],
    ['{"agent_cluster":"\\ud800"}', 'lone surrogate in a string: "\\ud800"'],
    ["[".repeat(5000), "JSON nested too deeply"],
    ['{"token":7}', '"token" must be a string: 7'],
    ['{"gauge":""}', '"gauge" must be 1 to 64 characters from a-z, 0-9 and _: ""'],
    ['{"gauge":"Lastcall"}', '"gauge" must be 1 to 64 characters from a-z, 0-9 and _: "Lastcall"'],
    ['{"gauge":"a.b"}', '"gauge" must be 1 to 64 characters from a-z, 0-9 and _: "a.b"'],
    [
      `{"gauge":"${"a".repeat(65)}"}`,
      `"gauge" must be 1 to 64 characters from a-z, 0-9 and _: "${"a".repeat(65)}"`,
    ],
    ['{"gauge":5}', '"gauge" must be a string: 5'],
    ['{"token":null}', '"token" must be a string: null'],
    [
      `{"token":"${"a".repeat(257)}"}`,
      `"token" must be at most 256 visible ASCII characters (0x21 to 0x7e): "${"a".repeat(199)}...`,
    ],
    [
      '{"token":"a b"}',
      '"token" must be at most 256 visible ASCII characters (0x21 to 0x7e): "a b"',
    ],
    [
      '{"token":"a\\tb"}',
      '"token" must be at most 256 visible ASCII characters (0x21 to 0x7e): "a\\tb"',
    ],
    [
      '{"token":"\\u007f"}',
      '"token" must be at most 256 visible ASCII characters (0x21 to 0x7e): "\\u007f"',
    ],
    [
      '{"token":"\u00e9"}',
      '"token" must be at most 256 visible ASCII characters (0x21 to 0x7e): "\u00e9"',
    ],
    [
      '{"token":"a\\r\\nx-injected: 1"}',
      '"token" must be at most 256 visible ASCII characters (0x21 to 0x7e)',
    ],
    ['{"holder_paths":1}', '"holder_paths" must be true or false: 1'],
    ['{"holder_paths":"true"}', '"holder_paths" must be true or false: "true"'],
    ['{"holder_paths":null}', '"holder_paths" must be true or false: null'],
    ['{"holder_paths":[true]}', '"holder_paths" must be true or false: [true]'],
    ['{"holder_paths":truex}', "malformed JSON"],
  ])("refuses %j with one error line", (configuration, message) => {
    const { host, vm } = configure(configuration);
    expect(vm.configured).toBe(false);
    expect(vm.failed).toBeUndefined();
    expect(host.logs).toHaveLength(1);
    expect(host.logs[0]!.level).toBe(4);
    expect(host.logs[0]!.message.startsWith(PREFIX + message)).toBe(true);
  });

  test("refuses a root_id other than lastcall_inflight", () => {
    const { host, vm } = configure("{}", "other");
    expect(vm.configured).toBe(false);
    expect(host.logs.map((l) => l.message)).toEqual([
      `${PREFIX}root_id must be "lastcall_inflight": other`,
    ]);
  });

  test("a long offending value is cut and control bytes are masked", () => {
    const { host } = configure(`{"instance":${"1".repeat(500)}}`);
    expect(host.logs[0]!.message).toBe(
      `${PREFIX}"instance" must be a string: ${"1".repeat(200)}...`,
    );
    const { host: second } = configure('{"x\\n":1}');
    expect(second.logs[0]!.message).toBe(`${PREFIX}unknown key "x\\n": 1`);
  });

  test("random and truncated inputs never trap: each is accepted or refused with one line", () => {
    const random = prng(7);
    const valid =
      '{"agent_cluster":"c","agent_authority":"a","heartbeat_ms":5,"push_timeout_ms":9,"epoch":1,"instance":"i\\u0041","exclude_paths":["/a*"],"token":"t\\u0021","holder_paths":true}';
    const alphabet = '{}[]",:\\u0123456789abcdefxyz -.eE\n\t\u00e9\u{1f600}';
    const inputs: string[] = [];
    for (let cut = 0; cut <= valid.length; cut++) inputs.push(valid.slice(0, cut));
    for (let i = 0; i < 1500; i++) {
      const length = Math.floor(random() * 40);
      let text = "";
      for (let j = 0; j < length; j++) text += alphabet[Math.floor(random() * alphabet.length)];
      inputs.push(random() < 0.5 ? `{${text}}` : text);
    }
    const host = new ProxyWasmHost();
    let accepted = 0;
    for (const configuration of inputs) {
      const before = host.logs.length;
      const vm = host.createVm({ configuration });
      expect(vm.failed).toBeUndefined();
      const lines = host.logs.slice(before);
      if (vm.configured) {
        accepted++;
        expect(lines).toEqual([]);
      } else {
        expect(lines).toHaveLength(1);
        expect(lines[0]!.message.startsWith(PREFIX)).toBe(true);
      }
    }
    expect(accepted).toBeGreaterThanOrEqual(2); // "" and the whole valid text at least
  });
});
