// The termination contenders: each starts its own way in front of the same Envoy configuration
// and is told to stop the way Kubernetes tells it (SIGTERM, or preStop hooks then SIGTERM).
import {
  existsSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { freePort } from "../../test/support/lastcall.ts";
import { adminRequestTimes, benchBootstrap } from "./bootstrap.ts";
import { ANCHORS, type Child, envoyBinary, get, ROOT, start, until } from "./context.ts";
import { listenerPort, untilReady } from "./envoy.ts";
import { children, commandLine, executable, signalIfSame, startTime } from "./proc.ts";

/** Settings every contender gets (parity). */
export interface Parity {
  /** The pod's terminationGracePeriodSeconds: everything is SIGKILLed then. */
  graceMs: number;
  /** Endpoint-removal lag of the workload; the minimum drain of lastcall and Istio exit-on-zero. */
  lagMs: number;
  /** Envoy worker threads. */
  concurrency: number;
  /** Static clusters in Envoy's configuration: `app` and `clusters − 1` more (its stats grow with them). */
  clusters: number;
}

/** A contender serving traffic, ready to be told to stop. */
export interface Running {
  /** Envoy's process id. */
  envoyPid: number;
  /** Port of `ingress`. */
  port: number;
  /** Kubernetes' part at the start of termination (SIGTERM, or preStop hooks then SIGTERM). */
  terminate(): void;
  /** The grace period is over: SIGKILL every process of the pod. */
  kill(): void;
  /** Settles when every process of the contender has exited. */
  exited: Promise<unknown>;
  /** Only for lastcall: whether its run folder still exists (checked after the exit). */
  leftover?: () => string | undefined;
  /** The agent's exit status once `exited` settled ("code 0", "signal SIGKILL"). */
  agentExit?: () => string | undefined;
  /** Only for lastcall: its drain and stop events (LASTCALL_EVENTS), to explain a run and time its own share of the tail. */
  drainEvents?: () => Record<string, unknown>[];
  /** Only for lastcall, once `exited` settled: when Envoy received `POST /quitquitquit` (Date.now() ms, its admin access log). */
  quitReceivedAt?: () => number | undefined;
  /** Last output, for error messages. */
  output(): string;
}

/** One contender. */
export interface Contender {
  /** Short id used in the JSON. */
  id: string;
  /** What it is, for the report. */
  label: string;
  /** Settings that differ from the contender's defaults. */
  settings: string;
  start(upstreamPort: number, parity: Parity): Promise<Running>;
}

/** lastcall's events a termination run keeps, in order: what its share of the tail is measured from. */
const LASTCALL_EVENTS =
  /"event":"(listeners_draining|min_drain_wait|drain_resumed|drain_flushing|drain_wait_done|envoy_quit_requested|terminated)"/;

function tempConfig(config: (dir: string) => unknown): { dir: string; path: string } {
  const dir = mkdtempSync(join(tmpdir(), "lcperf-"));
  const path = join(dir, "envoy.json");
  writeFileSync(path, JSON.stringify(config(dir)));
  return { dir, path };
}

function envoyChild(pid: number): number | undefined {
  const binary = realpathSync(envoyBinary());
  return children(pid).find((child) => executable(child) === binary);
}

/**
 * An agent that runs Envoy as its child: SIGTERM goes to the agent (it stops Envoy its way);
 * at the grace period both get SIGKILL, Envoy only if its pid is still the same process.
 */
function agentAndEnvoy(
  agent: Child,
  envoyPid: number,
  port: number,
): Pick<Running, "envoyPid" | "port" | "terminate" | "kill"> {
  const envoyStarted = startTime(envoyPid);
  return {
    envoyPid,
    port,
    terminate: () => agent.kill("SIGTERM"),
    kill: () => {
      agent.kill("SIGKILL");
      signalIfSame(envoyPid, envoyStarted, "SIGKILL");
    },
  };
}

function withCleanup(child: Child, dir: string): Promise<unknown> {
  return child.exited.then(() => rmSync(dir, { recursive: true, force: true }));
}

/** lastcall run, `inflight` (default) or `requests` mode. */
function lastcall(mode: "inflight" | "requests"): Contender {
  return {
    id: `lastcall-${mode}`,
    label: `lastcall --drain-mode ${mode}`,
    settings: `--grace = pod grace, --min-drain = endpoint lag${
      mode === "requests" ? ", --drain-mode requests" : ""
    }`,
    async start(upstreamPort, parity) {
      // Admin as lastcall would add it (loopback, --admin-port 0), plus an access log: when Envoy
      // was told to quit, on its own clock (lastcall logs `envoy_quit_requested` once Envoy answered).
      const { dir, path } = tempConfig((d) =>
        benchBootstrap({
          upstreamPort,
          extraClusters: parity.clusters - 1,
          admin: { port: 0 },
          adminAccessLog: join(d, "admin.log"),
        })
      );
      let ready: { pid: number; admin: string } | undefined;
      const drainEvents: Record<string, unknown>[] = [];
      const child = start(join(ROOT, "dist/lastcall"), [
        "run",
        "--config",
        path,
        "--admin-port",
        "0",
        "--status-port",
        "0",
        "--concurrency",
        String(parity.concurrency),
        "--grace",
        `${parity.graceMs}ms`,
        "--min-drain",
        `${parity.lagMs}ms`,
        "--drain-mode",
        mode,
        "--",
        "-l",
        "warning",
      ], {
        onLine: (line) => {
          if (line.includes('"event":"ready"')) {
            ready = JSON.parse(line) as { pid: number; admin: string };
          }
          if (LASTCALL_EVENTS.test(line)) {
            drainEvents.push(JSON.parse(line) as Record<string, unknown>);
          }
        },
      });
      let quitAt: number | undefined;
      const exited = child.exited.then(() => {
        try {
          quitAt = adminRequestTimes(
            readFileSync(join(dir, "admin.log"), "utf8"),
            "POST",
            "/quitquitquit",
          )[0];
        } catch {
          // no log: Envoy never started, or was not asked to quit
        }
        rmSync(dir, { recursive: true, force: true });
      });
      const died = child.exited.then(() => {
        throw new Error(`lastcall exited early:\n${child.output().slice(-3000)}`);
      });
      died.catch(() => {});
      const { pid, port } = await Promise.race([until(() => ready, "lastcall's ready event"), died])
        .then(async (r) => ({ ...r, port: await listenerPort({ url: r.admin }) }))
        .catch((error: unknown) => {
          child.kill("SIGKILL");
          throw error;
        });
      const runDir = dirname(commandLine(pid)[commandLine(pid).indexOf("-c") + 1] ?? "");
      let exitText: string | undefined;
      void child.exited.then((exit) => {
        exitText = exit.signal ? `signal ${exit.signal}` : `code ${exit.code}`;
      });
      return {
        ...agentAndEnvoy(child, pid, port),
        exited,
        leftover: () => (runDir.startsWith(tmpdir()) && existsSync(runDir) ? runDir : undefined),
        agentExit: () => exitText,
        drainEvents: () => drainEvents,
        quitReceivedAt: () => quitAt,
        output: child.output,
      };
    },
  };
}

/** Istio's pkg/envoy agent (bench/anchors/istio-agent), default sleep or exit-on-zero. */
function istio(exitOnZero: boolean): Contender {
  return {
    id: exitOnZero ? "istio-exit-on-zero" : "istio-default",
    label: exitOnZero
      ? "Istio pkg/envoy, EXIT_ON_ZERO_ACTIVE_CONNECTIONS"
      : "Istio pkg/envoy, default (sleep 5 s)",
    settings: exitOnZero ? "MINIMUM_DRAIN_DURATION = endpoint lag" : "none",
    async start(upstreamPort, parity) {
      const adminPort = await freePort();
      const { dir, path } = tempConfig(() =>
        benchBootstrap({
          upstreamPort,
          admin: { port: adminPort },
          extraClusters: parity.clusters - 1,
        })
      );
      const args = [
        "--envoy",
        envoyBinary(),
        "--config",
        path,
        "--admin-port",
        String(adminPort),
        "--concurrency",
        String(parity.concurrency),
      ];
      if (exitOnZero) args.push("--exit-on-zero", "--min-drain", `${parity.lagMs}ms`);
      const child = start(join(ANCHORS, "istio-agent"), args);
      const exited = withCleanup(child, dir);
      const died = child.exited.then(() => {
        throw new Error(`istio-agent exited early:\n${child.output().slice(-3000)}`);
      });
      died.catch(() => {});
      const admin = { url: `http://127.0.0.1:${adminPort}` };
      let pid = 0;
      let port = 0;
      try {
        await Promise.race([untilReady(admin, "Istio's Envoy"), died]);
        pid = await until(() => envoyChild(child.pid), "Istio's Envoy process");
        port = await listenerPort(admin);
      } catch (error) {
        const orphan = envoyChild(child.pid);
        if (orphan) signalIfSame(orphan, startTime(orphan), "SIGKILL");
        child.kill("SIGKILL");
        throw error;
      }
      const envoyStarted = startTime(pid);
      return {
        ...agentAndEnvoy(child, pid, port),
        exited: Promise.all([
          exited,
          until(
            () => (startTime(pid) !== envoyStarted ? true : undefined),
            "Istio's Envoy to exit",
            60_000,
            10,
          ),
        ]),
        output: child.output,
      };
    },
  };
}

/**
 * Contour's pair (`contour envoy shutdown-manager` beside Envoy, admin on a Unix socket) as in its
 * example DaemonSet: at termination the kubelet runs both preStop hooks at once, `contour envoy
 * shutdown` (fails health checks, polls until no connection, writes the ready file) and Envoy's
 * `GET :8090/shutdown` (returns once the file exists), then SIGTERMs each container whose hook
 * returned.
 */
function contour(checkIntervalS: number): Contender {
  return {
    id: `contour-${checkIntervalS}s`,
    label: `Contour shutdown-manager, --check-interval ${checkIntervalS}s`,
    settings: checkIntervalS === 5 ? "none" : "--check-interval 1s",
    async start(upstreamPort, parity) {
      const dir = mkdtempSync(join(tmpdir(), "lcperf-contour-"));
      const socket = join(dir, "admin.sock");
      const readyFile = join(dir, "ok");
      const config = join(dir, "envoy.json");
      writeFileSync(
        config,
        JSON.stringify(
          benchBootstrap({
            upstreamPort,
            admin: { pipe: socket },
            extraClusters: parity.clusters - 1,
          }),
        ),
      );
      const envoy = start(envoyBinary(), [
        "-c",
        config,
        "--concurrency",
        String(parity.concurrency),
        "--disable-hot-restart",
        "-l",
        "warning",
      ]);
      const servePort = await freePort();
      const contourBin = join(ANCHORS, "contour");
      const manager = start(contourBin, [
        "envoy",
        "shutdown-manager",
        "--serve-port",
        String(servePort),
        "--ready-file",
        readyFile,
      ]);
      const died = Promise.race([envoy.exited, manager.exited]).then(() => {
        throw new Error(
          `Contour's pair exited early:\n${envoy.output().slice(-2000)}${
            manager.output().slice(-2000)
          }`,
        );
      });
      died.catch(() => {});
      const admin = { socketPath: socket };
      let port = 0;
      try {
        await Promise.race([untilReady(admin, "Contour's Envoy"), died]);
        await Promise.race([
          until(
            async () => ((await get(`http://127.0.0.1:${servePort}/healthz`)).status === 200
              ? true
              : undefined),
            "shutdown-manager /healthz",
          ),
          died,
        ]);
        port = await listenerPort(admin);
      } catch (error) {
        envoy.kill("SIGKILL");
        manager.kill("SIGKILL");
        throw error;
      }
      let hook: Child | undefined;
      const all = [envoy, manager];
      return {
        envoyPid: envoy.pid,
        port,
        terminate: () => {
          hook = start(contourBin, [
            "envoy",
            "shutdown",
            "--admin-address",
            socket,
            "--check-interval",
            `${checkIntervalS}s`,
            "--ready-file",
            readyFile,
          ]);
          all.push(hook);
          void hook.exited.then(() => manager.kill("SIGTERM"));
          // A failed hook (the manager SIGTERMed before it answered) ends in SIGTERM too, as the kubelet does.
          const stopEnvoy = () => envoy.kill("SIGTERM");
          void get(`http://127.0.0.1:${servePort}/shutdown`, 600_000).then(stopEnvoy, stopEnvoy);
        },
        kill: () => {
          for (const child of all) child.kill("SIGKILL");
        },
        exited: Promise.all([envoy.exited, manager.exited]).then(async () => {
          hook?.kill("SIGKILL");
          await hook?.exited;
          rmSync(dir, { recursive: true, force: true });
        }),
        output: () => `${envoy.output()}${manager.output()}${hook?.output() ?? ""}`,
      };
    },
  };
}

/** Every contender, in the order they take turns. */
export const CONTENDERS: Contender[] = [
  lastcall("inflight"),
  lastcall("requests"),
  istio(true),
  istio(false),
  contour(5),
  contour(1),
];
