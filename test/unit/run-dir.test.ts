// The run folder is fresh on every start: an earlier lastcall's files go, anything else makes
// lastcall refuse the folder (it is nobody else's to clean or narrow), and modes are 0700/0600.
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { StartError } from "../../agent/lib/errors.ts";
import { isRunDirFile, prepareRunDir, writePrivateFile } from "../../agent/supervise/run-dir.ts";

const root = mkdtempSync(join(tmpdir(), "lastcall-rundir-unit-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
const fresh = () => join(root, `case-${n++}`);
const mode = (path: string) => statSync(path).mode & 0o777;

const LASTCALL_FILES = [
  "filter.wasm",
  "validate.json",
  "envoy-g1-epoch0.json",
  "envoy-g12-epoch3.json",
  "envoy-g1-epoch0.xds.sock",
  "envoy-g1-epoch0-lds.json",
  "envoy-g2-epoch1-lds.pb",
  "envoy-g1-epoch0-lds.json.0a1b2c3d.tmp",
  "admin-g1-epoch0",
  "base-id-g4",
];

describe("prepareRunDir", () => {
  it("creates a missing folder 0700", async () => {
    const dir = join(fresh(), "nested", "run");
    await prepareRunDir(dir);
    expect(mode(dir)).toBe(0o700);
    expect(readdirSync(dir)).toEqual([]);
  });

  it("removes every file an earlier lastcall wrote and makes the folder 0700", async () => {
    const dir = fresh();
    mkdirSync(dir, { mode: 0o755 });
    chmodSync(dir, 0o755);
    for (const name of LASTCALL_FILES) writeFileSync(join(dir, name), "stale", { mode: 0o666 });
    await prepareRunDir(dir);
    expect(readdirSync(dir)).toEqual([]);
    expect(mode(dir)).toBe(0o700);
  });

  it("refuses a folder holding a file it did not write, in one line naming it, and touches nothing", async () => {
    const dir = fresh();
    mkdirSync(dir, { mode: 0o755 });
    chmodSync(dir, 0o755);
    writeFileSync(join(dir, "admin-g1-epoch0"), "127.0.0.1:1");
    writeFileSync(join(dir, "notes.txt"), "mine");
    const error = await prepareRunDir(dir).then(() => undefined, (e) => e);
    expect(error).toBeInstanceOf(StartError);
    expect(error.message).toBe(
      `Cannot use --run-dir ${dir}: it holds files lastcall did not write (notes.txt); give lastcall a folder of its own`,
    );
    expect(readdirSync(dir).sort()).toEqual(["admin-g1-epoch0", "notes.txt"]);
    expect(mode(dir)).toBe(0o755);
  });

  it("refuses a folder with a known name that is a folder, and a path that is a file", async () => {
    const dir = fresh();
    mkdirSync(join(dir, "filter.wasm"), { recursive: true });
    await expect(prepareRunDir(dir)).rejects.toThrow(
      /holds files lastcall did not write \(filter\.wasm\)/,
    );
    const file = join(fresh());
    writeFileSync(file, "");
    await expect(prepareRunDir(file)).rejects.toThrow(
      new RegExp(`^Cannot use --run-dir ${file}: `),
    );
  });

  it("knows its own names and no others", () => {
    for (const name of LASTCALL_FILES) expect(isRunDirFile(name), name).toBe(true);
    for (
      const name of [
        "envoy.yaml",
        "admin",
        "envoy-g1-epoch0.yaml",
        "filter.wasm.bak",
        "base-id-gx",
        ".hidden",
      ]
    ) expect(isRunDirFile(name), name).toBe(false);
  });
});

describe("writePrivateFile", () => {
  it("writes 0600, and makes a file that was there 0600", async () => {
    const dir = fresh();
    mkdirSync(dir);
    const path = join(dir, "envoy-g1-epoch0.json");
    writeFileSync(path, "old", { mode: 0o666 });
    chmodSync(path, 0o666);
    await writePrivateFile(path, "{}");
    expect(mode(path)).toBe(0o600);
    await writePrivateFile(join(dir, "new.json"), "{}");
    expect(mode(join(dir, "new.json"))).toBe(0o600);
    expect(existsSync(path)).toBe(true);
  });
});
