// `npm start` as a terminal runs it: Ctrl-C drains, a second stops at once, closing the terminal
// drains, nothing is left behind.
import { type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import { waitFor } from "../support/envoy.ts";
import { createNetns, type Netns, netnsSkipReason } from "../support/netns.ts";
import { root } from "../support/paths.ts";

const skip = netnsSkipReason();
/** The ports the demo takes: Envoy's listener and admin, lastcall's status server, the demo app. */
const DEMO_PORTS = [8080, 10000, 15000, 15020];

interface Demo {
  readonly job: ChildProcess;
  output(): string;
  untilOutput(pattern: RegExp, timeoutMs?: number): Promise<string>;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** A signal to the job's process group, as a terminal sends it. */
  signal(signal: NodeJS.Signals): void;
}

const jobs = new Set<ChildProcess>();
afterEach(() => {
  for (const job of jobs) {
    try {
      process.kill(-job.pid!, "SIGKILL");
    } catch { /* gone */ }
  }
  jobs.clear();
});

/** `npm start -- --no-setup` (the set-up's build is what dist/ holds), as a terminal's foreground job in `ns`. */
function startDemo(ns: Netns): Demo {
  const job = ns.spawn("npm", ["start", "--silent", "--", "--no-setup"], {
    cwd: root,
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, npm_config_update_notifier: "false" },
  });
  jobs.add(job);
  let output = "";
  const waiters = new Set<() => void>();
  for (const stream of [job.stdout!, job.stderr!]) {
    stream.setEncoding("utf8").on("data", (chunk: string) => {
      output += chunk;
      for (const check of waiters) check();
    });
  }
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((done) =>
    job.once("exit", (code, signal) => done({ code, signal }))
  );
  return {
    job,
    output: () => output,
    untilOutput: (pattern, timeoutMs = 30_000) =>
      new Promise((done, fail) => {
        const timer = setTimeout(
          () => fail(new Error(`no ${pattern} after ${timeoutMs} ms:\n${output}`)),
          timeoutMs,
        );
        const check = () => {
          const match = pattern.exec(output);
          if (!match) return;
          clearTimeout(timer);
          waiters.delete(check);
          done(match[0]);
        };
        waiters.add(check);
        check();
      }),
    exited,
    signal: (signal) => process.kill(-job.pid!, signal),
  };
}

/** A request through the demo's Envoy from inside the namespace; resolves with the status curl saw (000: cut). */
function request(ns: Netns, path: string): Promise<string> {
  return ns.run("curl", [
    "-s",
    "-o",
    "/dev/null",
    "-w",
    "%{http_code}",
    `http://127.0.0.1:10000${path}`,
  ]).then((r) => r.stdout);
}

/** Resolves once lastcall counts `n` requests in flight. */
async function inflight(ns: Netns, n: number): Promise<void> {
  await waitFor(async () => {
    const state = await ns.run("curl", ["-s", "http://127.0.0.1:15020/v1/state"]);
    return state.code === 0 && (JSON.parse(state.stdout) as { inflight: number }).inflight === n
      ? true
      : undefined;
  }, { what: `${n} in flight`, intervalMs: 100 });
}

/** Once the job is gone: no process is left in the namespace and none of the demo's ports is held. */
async function nothingLeft(ns: Netns): Promise<void> {
  // The kernel reaps the last children a moment after the job's own exit.
  await waitFor(() => (ns.pids().length === 0 ? true : undefined), {
    what: "no process left in the namespace",
    timeoutMs: 5000,
  });
  expect(ns.listeningPorts()).toEqual([]);
  const bind = await ns.run(process.execPath, [
    "-e",
    `
    const net = require("net");
    Promise.all(${JSON.stringify(DEMO_PORTS)}.map((port) => new Promise((ok, fail) => {
      const s = net.createServer().once("error", fail).listen(port, "127.0.0.1", () => s.close(ok));
    }))).then(() => console.log("all free"), (e) => { console.log(e.message); process.exit(1); });
  `,
  ]);
  expect(bind).toMatchObject({ code: 0, stdout: "all free\n" });
}

describe.skipIf(skip)(skip ? `npm start in a terminal: ${skip}` : "npm start in a terminal", () => {
  it("Ctrl-C drains (the request in flight is waited for); Ctrl-C again stops at once; nothing is left", async () => {
    const ns = createNetns();
    const demo = startDemo(ns);
    await demo.untilOutput(/lastcall: ready\. Try:/);
    const slow = request(ns, "/slow?ms=60000");
    await inflight(ns, 1);

    demo.signal("SIGINT");
    await demo.untilOutput(/Ctrl-C: draining \(Ctrl-C again to stop at once\)/);
    await demo.untilOutput(/ terminate source=SIGINT/);
    // The drain waits for the request (2 s into the drain: a person's second Ctrl-C, not npm's copy of the first).
    await demo.untilOutput(/ drain_waiting inflight=1 /);
    expect(demo.output()).not.toMatch(/terminate_ignored|stop_now/);

    const second = Date.now();
    demo.signal("SIGINT");
    await demo.untilOutput(/ stop_now source=SIGINT/);
    await demo.untilOutput(/ terminated .*reason=stopped_now .*inflight_at_stop=1/);
    await demo.exited;
    // At once: the request had almost a minute to go.
    expect(Date.now() - second).toBeLessThan(5000);
    expect(await slow).toBe("000");
    expect(demo.output()).not.toMatch(/terminate_ignored/);
    expect(demo.output().match(/ terminate source=/g)).toHaveLength(1);
    await nothingLeft(ns);
  });

  it("closing the terminal (SIGHUP to the job): a graceful drain, no reload; then lastcall, Envoy and the app are gone and the ports free", async () => {
    const ns = createNetns();
    const demo = startDemo(ns);
    await demo.untilOutput(/lastcall: ready\. Try:/);
    const slow = request(ns, "/slow?ms=3000");
    await inflight(ns, 1);

    demo.signal("SIGHUP");
    await demo.untilOutput(/the terminal went away \(SIGHUP\): draining/);
    await demo.untilOutput(/ terminated .*reason=inflight_zero .*inflight_at_stop=0/);
    expect(await slow).toBe("200");
    await demo.exited;
    // npm itself dies of the hang-up at once; what it started is waited for above (the terminated line) and here.
    await nothingLeft(ns);
    expect(demo.output()).not.toMatch(/ reload | epoch epoch=1|terminate_ignored/);
  });

  it("Ctrl-C after the terminal went away stops at once", async () => {
    const ns = createNetns();
    const demo = startDemo(ns);
    await demo.untilOutput(/lastcall: ready\. Try:/);
    const slow = request(ns, "/slow?ms=60000");
    await inflight(ns, 1);
    // Only start.mjs gets it: npm would die of the hang-up (as in a closed terminal) and take the pipes' other end.
    const start = await waitFor(
      () => ns.pids().find((pid) => /^\S*node build\/start\.mjs/.test(commandLine(pid))),
      { what: "start.mjs's pid" },
    );
    process.kill(start, "SIGHUP");
    await demo.untilOutput(/ drain_waiting inflight=1 /);
    process.kill(start, "SIGINT");
    await demo.untilOutput(/ terminated .*reason=stopped_now/);
    expect(await slow).toBe("000");
    await nothingLeft(ns);
  });
});

/** A process's command line, "" when it is gone. */
function commandLine(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ");
  } catch {
    return "";
  }
}
