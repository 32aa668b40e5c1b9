#!/usr/bin/env node
// `npm start`: set up a fresh clone, start the demo app, and run lastcall supervising Envoy with
// the in-flight filter in front of it. Ctrl-C drains gracefully (a second Ctrl-C stops at once).
import { spawn } from "node:child_process";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { setup } from "./setup.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const { envoy, version } = await setup();
console.log(`envoy ${version}`);

// Own process groups: a terminal's Ctrl-C reaches this script only (and npm forwards it once
// more), so lastcall gets exactly one graceful stop and the app serves until the drain ends.
const app = spawn(process.execPath, [join(root, "examples/demo-app.mjs")], { stdio: "inherit", detached: true });
const lastcall = spawn(join(root, "dist/lastcall"), [
  "run", "--config", join(root, "examples/envoy.yaml"), "--log-format", "text", "--min-drain", "1s", "--", "-l", "warning",
], { stdio: "inherit", detached: true, env: { ...process.env, ENVOY_BIN: envoy } });

let interrupts = 0;
let firstAt = 0;
process.on("SIGINT", () => {
  const now = Date.now();
  if (interrupts === 0) {
    firstAt = now;
    console.log("\nlastcall: draining (Ctrl-C again to stop at once)");
    lastcall.kill("SIGTERM");
  } else if (now - firstAt > 500) {
    // A duplicate from npm arrives within milliseconds; a person's second Ctrl-C does not.
    lastcall.kill("SIGINT");
    lastcall.kill("SIGINT");
  }
  interrupts++;
});
process.on("SIGTERM", () => lastcall.kill("SIGTERM"));

const ready = spawn(join(root, "dist/lastcall"), ["wait", "--timeout", "30s"], { stdio: "inherit" });
ready.on("exit", (code) => {
  if (code === 0) console.log("\nlastcall: ready. Try:\n  curl http://127.0.0.1:10000/\n  curl 'http://127.0.0.1:10000/slow?ms=5000'   (then Ctrl-C: the drain waits for it)\n  curl --limit-rate 3M -o /dev/null 'http://127.0.0.1:10000/download?mb=30'   (a slow reader: the drain waits for its last byte)\n  curl http://127.0.0.1:15020/v1/state\n  curl http://127.0.0.1:15020/metrics\n");
});
let stopping = false;
app.on("exit", (code) => {
  if (stopping) return;
  console.error(`lastcall start: the demo app exited (code ${code}); is port 8080 taken? Stopping.`);
  lastcall.kill("SIGTERM");
});
lastcall.on("exit", (code, signal) => {
  stopping = true;
  app.kill("SIGTERM");
  process.exit(code ?? (signal ? 1 : 0));
});
