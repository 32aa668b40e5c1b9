// What `lastcall inject` does with a manifest's text: the documents it changes keep their
// author's layout, and text that is not YAML, or an unrendered template, is refused naming the
// document and line (template text inside strings is not a template).
import { describe, expect, it } from "vitest";
import { ManifestError } from "../../agent/k8s/manifest.ts";
import { classic, inject } from "./inject-support.ts";

describe("the documents inject changes keep their author's layout", () => {
  it("comments and order of documents survive", () => {
    const text =
      "# web tier\nkind: Pod\nmetadata:\n  name: web # the name\nspec:\n  containers:\n  - name: app # main\n    image: x\n    ports: [{containerPort: 80}]\n---\nkind: Service\nmetadata: {name: web}\n";
    const out = inject(text).text;
    expect(out).toContain("# web tier\n");
    expect(out).toContain("name: web # the name");
    expect(out).toContain("- name: app # main");
    expect(out.endsWith("---\nkind: Service\nmetadata: {name: web}\n")).toBe(true);
  });

  it("kubectl's sequence style (items at the key's indentation) is kept", () => {
    const text =
      'kind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: app\n    image: x\n    command: ["./server"]\n    ports: [{containerPort: 80}]\n';
    const out = inject(text).text;
    expect(out).toMatch(/^ {2}initContainers:\n {2}- name: lastcall$/m);
    expect(out).toMatch(/^ {2}containers:\n {2}- name: app$/m);
    expect(out).toContain('command: ["./server"]');
  });

  it("a one-line list it adds to becomes one item per line; one-line items stay as they are", () => {
    const text =
      "kind: Pod\nmetadata: {name: web}\nspec:\n  containers: [{name: app, image: x, ports: [{containerPort: 80}]}]\n";
    const out = inject(text, classic).text;
    expect(out).toContain(
      "  containers:\n    - {name: app, image: x, ports: [{containerPort: 80}], lifecycle: {preStop: {httpGet: {path: /v1/app-stop, port: 15020}}}}\n    - name: lastcall\n",
    );
  });

  it("indented sequences stay indented", () => {
    const text =
      "kind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n    - name: app\n      image: x\n      ports: [{containerPort: 80}]\n";
    expect(inject(text).text).toMatch(/^ {2}containers:\n {4}- name: app$/m);
  });
});

describe("manifests that are not YAML", () => {
  it("names the document and the line", () => {
    const text =
      "kind: Pod\n---\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1: 2\n";
    let error: unknown;
    try {
      inject(text);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ManifestError);
    expect(error).toMatchObject({ document: 2, line: 7 });
    expect((error as Error).message).toMatch(/^document 2, line 7: /);
  });

  it("duplicate keys are an error too", () => {
    expect(() => inject("kind: Pod\nkind: Job\n")).toThrow(
      /^document 1, line 2: Map keys must be unique/,
    );
  });
});

describe("unrendered templates are refused, template text inside strings is not", () => {
  const pod = (line: string, extra = "") =>
    `apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n${extra}spec:\n  containers:\n  - name: web\n    image: example/web:1\n    ports: [{containerPort: 80}]\n${line}`;
  it.each([
    ["a value that is an action", pod("", "  labels:\n    app: {{ .Values.app }}\n"), 6],
    ["an action inside a plain scalar", pod("    command: [web-{{ .Release.Name }}]\n"), 10],
    [
      "an action on a line of its own",
      pod("", '  labels:\n    {{- include "web.labels" . | nindent 4 }}\n'),
      6,
    ],
    [
      "a control action in a later document",
      `kind: ConfigMap\n---\n{{- if .Values.enabled }}\n${pod("")}{{- end }}\n`,
      3,
    ],
  ])("%s: document and line named", (_, text, line) => {
    expect(() => inject(text)).toThrow(
      new RegExp(`^document \\d, line ${line}: an unrendered template`),
    );
  });

  it.each([
    [
      "in double quotes (an alert's text)",
      pod(`    env:\n    - name: ALERT\n      value: "{{ $labels.pod }} is down"\n`),
    ],
    [
      "in a block scalar (a ConfigMap's template file)",
      pod(`    args:\n    - |\n      {{ range .Items }}{{ .Name }}{{ end }}\n`),
    ],
    ["braces that are no action", pod(`    command:\n    - echo\n    - -{{\n    - x}}\n`)],
  ])("%s: injected", (_, text) => {
    expect(inject(text).injected).toBe(1);
  });
});
