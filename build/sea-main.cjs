// The single executable's entry: it compiles the embedded bundle (dist/lastcall.sea.cjs) with V8's
// code cache of one start, so a start compiles almost nothing before Envoy's spawn.
//   node build/sea-main.cjs <bundle> <cache> <args...>   runs the bundle once as
//   `lastcall <args...>` and writes the code cache of what ran (build/bundle.mjs does).
// LASTCALL_CODE_CACHE=report prints on stderr whether V8 took the cache (the test does).
"use strict";
const { readFileSync, writeFileSync } = require("node:fs");
const { dirname } = require("node:path");
const sea = require("node:sea");
const vm = require("node:vm");

/** Runs the bundle, a function expression of Node's CommonJS module wrapper. */
function run(script, filename) {
  const module = { exports: {} };
  script.runInThisContext()(module.exports, require, module, filename, dirname(filename));
}

if (sea.isSea()) {
  // The bundle is ASCII: as Latin-1 it is one byte a character (past a megabyte, a string Node
  // keeps outside V8's heap), where UTF-8 text would be read into a string of two.
  const source = Buffer.from(sea.getRawAsset("lastcall.cjs")).toString("latin1");
  const cache = Buffer.from(sea.getRawAsset("lastcall.cache"));
  const script = new vm.Script(source, { filename: "lastcall.cjs", cachedData: cache });
  if (process.env.LASTCALL_CODE_CACHE === "report") {
    const taken = cache.length > 0 && !script.cachedDataRejected;
    process.stderr.write(
      `lastcall: code cache ${taken ? "taken" : "rejected"} (${cache.length} bytes)\n`,
    );
  }
  run(script, process.execPath);
} else {
  const [bundle, out, ...args] = process.argv.slice(2);
  const script = new vm.Script(readFileSync(bundle, "latin1"), { filename: "lastcall.cjs" });
  process.argv = [process.execPath, bundle, ...args];
  process.on("exit", () => writeFileSync(out, script.createCachedData()));
  run(script, bundle);
}
