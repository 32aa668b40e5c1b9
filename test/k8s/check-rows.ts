// What the `lastcall check` tables share: the fixtures, edits of their objects, and the runner
// that asks both the check functions and the built CLI for each row's exact findings.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import YAML from "yaml";
import { checkManifest, checkReport, summaryLine } from "../../agent/k8s/check.ts";
import { runLastcall } from "../support/lastcall.ts";
import type { Json } from "../support/json.ts";
import { root } from "../support/paths.ts";

export { root };
export const fixturePath = (name: string) => join(root, "test/k8s/fixtures/check", name);
const read = (path: string) => readFileSync(path, "utf8");
/** The first document of a fixture as a plain object. */
export const objectOf = (path: string): Json => YAML.parseAllDocuments(read(path))[0].toJS();
/** A fixture's first document, edited. */
export const edited = (path: string, edit: (object: Json) => void) => {
  const object = objectOf(path);
  edit(object);
  // As YAML 1.1, the YAML of Kubernetes' reader: strings such as "yes" stay quoted.
  return YAML.stringify(object, { version: "1.1" });
};
export const specOf = (object: Json) => object.spec.template.spec;
/** A container of a pod spec, regular or init, by name. */
export const container = (object: Json, name: string): Json =>
  [...(specOf(object).containers ?? []), ...(specOf(object).initContainers ?? [])].find((
    c: { name: string },
  ) => c.name === name);
export const NGINX = fixturePath("nginx-deployment.yaml");
export const CLASSIC_NO_PRESTOP =
  'deployment/hello: container "hello" has no preStop: it gets SIGTERM at once while istio-proxy still takes new requests until terminationDrainDuration 5s (default): the app stops answering requests the proxy forwards; add lifecycle.preStop.sleep.seconds: 5 on container "hello"';

/** One manifest and what check must say about it. */
export interface Row {
  name: string;
  /** A file to pass with -f, or the text to pass on stdin. */
  file?: string;
  text?: () => string;
  findings: string[];
  notes?: string[];
  summary: string;
}

/** One test per row: the findings, notes and summary, from the functions and from the CLI. */
export function checkRows(title: string, rows: Row[]): void {
  describe(title, () => {
    it.each(rows)("$name", async ({ file, text, findings, notes = [], summary }) => {
      const input = file ? read(file) : text!();
      const report = checkReport(input);
      expect(checkManifest(input).map((f) => `${f.ref}: ${f.message}`)).toEqual(findings);
      expect(report.flatMap((w) => w.notes.map((n) => `${w.ref}: ${n}`))).toEqual(notes);
      expect(summaryLine(report)).toBe(summary);
      // The same through the built CLI: findings, then notes, then the summary, on stdout.
      const result = await runLastcall(
        file ? ["check", "-f", file] : ["check", "-f", "-"],
        file ? "" : input,
      );
      expect({ code: result.code, stdout: result.stdout, stderr: result.stderr }).toEqual({
        code: findings.length ? 1 : 0,
        stdout: [...findings, ...notes, summary].map((line) => `${line}\n`).join(""),
        stderr: "",
      });
    });
  });
}
