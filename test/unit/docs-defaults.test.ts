// The defaults the docs name (`default \`--min-drain 5s\``) are the ones `lastcall run --help`
// shows: both come from the option table (RUN_DEFAULTS), and this holds the docs to it.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { runOptionList } from "../../agent/options.ts";
import { root } from "../support/paths.ts";

const docs = [
  "README.md",
  ...readdirSync(join(root, "docs")).filter((f) => f.endsWith(".md")).map((f) => `docs/${f}`),
];
const named = docs.flatMap((file) =>
  [...readFileSync(join(root, file), "utf8").matchAll(/default `(--[a-z-]+) ([^`]+)`/g)].map((m) =>
    [file, m[1], m[2]] as const
  )
);
const helpDefault = (flag: string) => {
  const o = runOptionList().find((option) => option.long === flag);
  return o?.defaultValueDescription ??
    (o?.defaultValue === undefined ? undefined : String(o.defaultValue));
};

describe("defaults named in the docs", () => {
  it("there are some", () => {
    expect(named.length).toBeGreaterThanOrEqual(3);
  });

  it.each(named)("%s: default %s %s is lastcall run's", (_, flag, value) => {
    expect(helpDefault(flag)).toBe(value);
  });
});
