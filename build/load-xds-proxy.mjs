// What agent/xds/load-proxy.ts becomes in the Node builds (build/bundle.mjs): the xDS proxy is
// the separate bundle dist/xds-proxy.cjs, next to dist/lastcall.mjs, or the asset of that name
// inside the single executable. It needs nothing but Node's built-in modules.
import { createRequire } from "node:module";
import { runInThisContext } from "node:vm";

let loaded;

export function loadXdsProxy() {
  if (loaded) return Promise.resolve(loaded);
  let sea;
  try {
    // The bundles' require(): import() fails in the single executable, whose code is cached.
    sea = typeof require === "function" ? require("node:sea") : undefined;
  } catch {
    // Node without single-executable support: not one
  }
  if (sea?.isSea?.()) {
    const code = sea.getAsset("xds-proxy.cjs", "utf8");
    const module = { exports: {} };
    const wrapper = runInThisContext(
      `(function (exports, require, module, __filename, __dirname) {${code}\n})`,
      { filename: "xds-proxy.cjs" },
    );
    wrapper(module.exports, createRequire(process.execPath), module, "xds-proxy.cjs", ".");
    loaded = module.exports;
  } else {
    loaded = createRequire(import.meta.url)("./xds-proxy.cjs");
  }
  return Promise.resolve(loaded);
}
