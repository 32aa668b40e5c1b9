#!/usr/bin/env node
// `npm start`: set up, start the demo app, and run lastcall supervising Envoy in front of it; exits
// once everything is gone.
import { spawn } from "node:child_process";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
/** A copy of each Ctrl-C that npm forwards comes within milliseconds; a person's next one does not. */
const SAME_CTRL_C_MS = 500;
/** How long a stop at once may take before everything is killed. */
const KILL_AFTER_MS = 10_000;
/** How long the app may take to close after lastcall is gone. */
const APP_CLOSE_MS = 5000;

// After the terminal is gone, writing to it fails (EIO): nobody reads it, the demo still stops.
for (const stream of [process.stdout, process.stderr]) stream.on("error", () => {});
const say = (line) => console.log(`\nlastcall start: ${line}`);

let envoy;
let version;
if (process.argv.includes("--no-setup")) {
  const { resolveEnvoy, envoyVersion } = await import("./envoy.mjs");
  envoy = resolveEnvoy();
  version = envoyVersion(envoy);
} else {
  console.log("lastcall start: setting up and building (about 10 s, more on a fresh clone)");
  ({ envoy, version } = await (await import("./setup.mjs")).setup());
}
console.log(`envoy ${version}`);

// Own sessions (and process groups): a terminal's Ctrl-C and hang-up reach this script only (and
// npm, which forwards Ctrl-C once more), so each child is told exactly once what to do.
const app = spawn(process.execPath, [join(root, "examples/demo-app.mjs")], {
  stdio: "inherit",
  detached: true,
});
const lastcall = spawn(join(root, "dist/lastcall"), [
  "run",
  "--config",
  join(root, "examples/envoy.yaml"),
  "--log-format",
  "text",
  "--min-drain",
  "1s",
  "--",
  "-l",
  "warning",
], { stdio: "inherit", detached: true, env: { ...process.env, ENVOY_BIN: envoy } });
const ready = spawn(join(root, "dist/lastcall"), ["wait", "--timeout", "30s"], {
  stdio: "inherit",
});

const exited = (child) => child.exitCode !== null || child.signalCode !== null;
const kill = (child, signal) => exited(child) || child.kill(signal);

let presses = 0;
let lastPressAt = 0;
let stopping = false;
/**
 * The graceful stop, whatever asked for it: SIGINT to lastcall, which drains as on SIGTERM and
 * takes a second SIGINT as "stop at once". The app is stopped once lastcall is gone.
 */
function drain(why) {
  if (stopping) return;
  stopping = true;
  kill(ready, "SIGTERM");
  say(`${why}: draining (Ctrl-C again to stop at once)`);
  kill(lastcall, "SIGINT");
}
/** Ctrl-C, Ctrl-C again, a third time: drain, stop at once, kill. */
process.on("SIGINT", () => {
  const now = Date.now();
  if (presses > 0 && now - lastPressAt < SAME_CTRL_C_MS) return;
  lastPressAt = now;
  presses++;
  if (presses === 1 && !stopping) return drain("Ctrl-C");
  if (presses <= 2) {
    say("stopping at once: requests still in flight are cut (Ctrl-C again to kill)");
    kill(lastcall, "SIGINT");
    setTimeout(killAll, KILL_AFTER_MS).unref();
    return;
  }
  killAll();
});
process.on("SIGTERM", () => drain("SIGTERM"));
process.on("SIGHUP", () => drain("the terminal went away (SIGHUP)"));

function killAll() {
  if (exited(lastcall) && exited(app)) return;
  say("killing lastcall and the app");
  kill(lastcall, "SIGKILL");
  kill(app, "SIGKILL");
}

ready.on("exit", (code) => {
  if (code === 0 && !stopping) {
    console.log(
      "\nlastcall: ready. Try:\n  curl http://127.0.0.1:10000/\n  curl 'http://127.0.0.1:10000/slow?ms=5000'   (then Ctrl-C: the drain waits for it)\n  curl --limit-rate 3M -o /dev/null 'http://127.0.0.1:10000/download?mb=30'   (a slow reader: the drain waits for its last byte)\n  curl http://127.0.0.1:15020/v1/state\n  curl http://127.0.0.1:15020/metrics\n",
    );
  }
});
app.on("exit", (code) => {
  if (stopping || exited(lastcall)) return;
  console.error(
    `lastcall start: the demo app exited (code ${code}); is port 8080 taken? Stopping.`,
  );
  drain("the demo app is gone");
});
lastcall.on("exit", (code, signal) => {
  stopping = true;
  kill(ready, "SIGTERM");
  // Exit only once the app is gone too: nothing is left holding a port.
  const done = () => process.exit(code ?? (signal ? 1 : 0));
  if (exited(app)) return done();
  app.once("exit", done);
  kill(app, "SIGTERM");
  setTimeout(() => kill(app, "SIGKILL"), APP_CLOSE_MS).unref();
});
