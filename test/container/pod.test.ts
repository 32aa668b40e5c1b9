// The image in a real container runtime: podman plays the demo pod, stops it, and every request
// gets its answer.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildImages } from "../../build/image.mjs";
import {
  containerState,
  containerTestsSkipReason,
  lastcallEvents,
  playPod,
  podman,
  removePod,
  runInPod,
} from "../support/podman.ts";
import { root } from "../support/paths.ts";

const POD = "lastcall-demo";
const SIDECAR = `${POD}-lastcall`;
const APP = `${POD}-app`;
const GRACE_S = 30;
/** The long requests, all in flight when the pod is stopped; the longest outlasts --min-drain. */
const LONG_MS = [2000, 4000, 6000, 8000, 9000];
/** lastcall's default --min-drain: the drain never ends before it. */
const MIN_DRAIN_MS = 5000;

const skipReason = containerTestsSkipReason();

if (skipReason) {
  it.skip(`container tests: ${skipReason}`, () => {});
} else {
  describe("lastcall's image in a pod (podman)", () => {
    let images: Awaited<ReturnType<typeof buildImages>>;
    let netns: string;
    let running: ReturnType<typeof runInPod> | undefined;

    beforeAll(async () => {
      // Cached images: seconds. A cold build (Debian rootfs, stand-ins, the Dockerfile): minutes.
      images = await buildImages();
      const manifest = readFileSync(join(root, "examples/k8s/pod-demo.yaml"), "utf8")
        .replace("image: node:20-bookworm-slim", `image: ${images.node}`)
        .replace("image: lastcall:0.1.0", `image: ${images.lastcall}`);
      netns = await playPod(POD, "pod.yaml", manifest);
    }, 20 * 60_000);

    afterAll(async () => {
      running?.child.kill();
      await removePod(POD);
    }, 120_000);

    it("ships the demo app byte for byte in the example manifest", () => {
      const manifest = readFileSync(join(root, "examples/k8s/pod-demo.yaml"), "utf8");
      const block = manifest.slice(
        manifest.indexOf("  demo-app.mjs: |\n") + "  demo-app.mjs: |\n".length,
      );
      const app = block.split("\n").map((line) => line.replace(/^ {4}/, "")).join("\n");
      expect(app).toBe(readFileSync(join(root, "examples/demo-app.mjs"), "utf8"));
    });

    it("runs lastcall as PID 1, uid and gid 101; the postStart hook `lastcall wait` passes and leaves no zombie", async () => {
      expect(await podman(["exec", SIDECAR, "lastcall", "wait", "--timeout", "60s"])).toBe("");
      const cmdline = await podman(["exec", SIDECAR, "cat", "/proc/1/cmdline"]);
      expect(cmdline.split("\0").slice(0, 2)).toEqual(["/usr/local/bin/lastcall", "run"]);
      const status = await podman(["exec", SIDECAR, "cat", "/proc/1/status"]);
      expect(/^Uid:\s+(\d+)/m.exec(status)?.[1]).toBe("101");
      expect(/^Gid:\s+(\d+)/m.exec(status)?.[1]).toBe("101");
      // Every process in the container: lastcall, Envoy, the watchdog shell, and this shell.
      const stats = await podman([
        "exec",
        SIDECAR,
        "sh",
        "-c",
        "for f in /proc/[0-9]*/stat; do cat $f; echo; done",
      ]);
      const processes = stats.split("\n").filter(Boolean).map((line) => {
        const [, pid, name, state, ppid] = /^(\d+) \((.*)\) (\S) (\d+)/.exec(line) ?? [];
        return { pid: Number(pid), name, state, ppid: Number(ppid) };
      });
      expect(processes.filter((p) => p.state === "Z")).toEqual([]);
      expect(processes.filter((p) => p.ppid === 1).map((p) => p.name).sort()).toEqual([
        "envoy",
        "sh",
      ]);
    });

    it("answers every request in flight at SIGTERM and exits after the last one, long before the grace period", async () => {
      const client = runInPod(netns, join(root, "test/container/pod-client.mjs"), {
        listener: "http://127.0.0.1:10000",
        status: "http://127.0.0.1:15020",
        longMs: LONG_MS,
        shortCount: 3,
        timeoutMs: 60_000,
      });
      running = client;
      await client.next("inflight", 60_000);

      const stopAt = Date.now();
      await podman(["pod", "stop", "-t", String(GRACE_S), POD]);
      const stopReturnedAt = Date.now();
      const done = await client.next("done", 60_000);

      const responses = client.events.filter((e) => e.event === "response");
      const shorts = client.events.filter((e) => e.event === "short");
      expect(shorts.map((e) => e.status)).toEqual([200, 200, 200]);
      expect(responses.filter((e) => !e.ok)).toEqual([]);
      expect(responses).toHaveLength(LONG_MS.length);
      expect(done.failed).toBe(0);

      const events = await lastcallEvents(SIDECAR);
      const sidecar = await containerState(SIDECAR);
      const app = await containerState(APP);
      const at = (name: string) => {
        const found = events.find((e) => e.event === name);
        expect(found, `lastcall event ${name}`).toBeDefined();
        return Date.parse(found!.ts);
      };
      const terminated = events.find((e) => e.event === "terminated")!;
      expect(events.find((e) => e.event === "terminate")?.source).toBe("SIGTERM");
      expect(terminated).toMatchObject({ mode: "inflight", inflight_at_stop: 0 });
      expect(sidecar.exitCode).toBe(0);
      expect(app.exitCode).toBe(0);

      // Order: stop → SIGTERM seen → drain → last response → terminated → container exit.
      const lastResponse = Math.max(...responses.map((e) => e.t));
      // The app answers a request no sooner than asked: a floor for each response's end that does
      // not depend on when the client got to write its line.
      const lastAnswerFloor = Math.max(...responses.map((e) => Number(e.started) + Number(e.ms)));
      expect(at("terminate")).toBeGreaterThanOrEqual(stopAt);
      expect(at("drain_start")).toBeGreaterThanOrEqual(at("terminate"));
      expect(lastAnswerFloor).toBeGreaterThan(at("drain_start"));
      expect(at("terminated")).toBeGreaterThanOrEqual(lastAnswerFloor);
      expect(sidecar.finishedAt).toBeGreaterThanOrEqual(at("terminated"));
      expect(sidecar.finishedAt).toBeGreaterThanOrEqual(lastResponse);
      // Right after the last response (not at --min-drain, not at the grace period) …
      expect(sidecar.finishedAt - lastResponse).toBeLessThan(3000);
      expect(lastResponse - stopAt).toBeGreaterThan(MIN_DRAIN_MS);
      // … and long before SIGKILL.
      expect(sidecar.finishedAt - stopAt).toBeLessThan((GRACE_S * 1000) / 2);
      expect(stopReturnedAt - stopAt).toBeLessThan((GRACE_S * 1000) / 2);

      const version = JSON.parse(await podman(["version", "--format", "json"])).Client.Version;
      const rel = (t: number) => t - stopAt;
      const timeline = {
        recorded: new Date(stopAt).toISOString(),
        runtime: `podman ${version}, runc`,
        pod: "examples/k8s/pod-demo.yaml",
        grace_ms: GRACE_S * 1000,
        min_drain_ms: MIN_DRAIN_MS,
        events: [
          { at_ms: 0, who: "podman", what: `podman pod stop -t ${GRACE_S}` },
          ...events.filter((e) => Date.parse(e.ts) >= stopAt)
            .map((e) => ({
              at_ms: rel(Date.parse(e.ts)),
              who: "lastcall",
              what: e.event === "terminate" ? "terminate (SIGTERM)" : e.event,
            })),
          ...responses.map((e) => ({
            at_ms: rel(e.t),
            who: "client",
            what: `response ${e.status} after ${e.ms} ms`,
          })),
          { at_ms: rel(app.finishedAt), who: "app", what: `container exit ${app.exitCode}` },
          {
            at_ms: rel(sidecar.finishedAt),
            who: "sidecar",
            what: `container exit ${sidecar.exitCode}`,
          },
          { at_ms: rel(stopReturnedAt), who: "podman", what: "pod stop returned" },
        ].sort((a, b) => a.at_ms - b.at_ms),
        requests: responses.map((e) => ({
          ms: e.ms,
          started_ms: rel(Number(e.started)),
          ended_ms: rel(e.t),
          status: e.status,
        })),
      };
      writeFileSync(
        join(root, ".cache", "container", "pod-timeline.json"),
        `${JSON.stringify(timeline, null, 2)}\n`,
      );
    });
  });
}
