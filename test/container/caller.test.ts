// `lastcall inject --mode classic` played by podman: the app's outbound calls after SIGTERM all get
// their answer.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildImages } from "../../build/image.mjs";
import { waitFor } from "../support/envoy.ts";
import { lastcallCommand } from "../support/lastcall.ts";
import {
  containerState,
  containerTestsSkipReason,
  lastcallEvents,
  playPod,
  podman,
  type PodScript,
  removePod,
  runInPod,
} from "../support/podman.ts";
import { root } from "../support/paths.ts";

// podman 4.3 names a Deployment's pod <name>-pod-0 and its containers <pod>-<container>.
const POD = "caller-pod-0";
const SIDECAR = `${POD}-lastcall`;
const APP = `${POD}-app`;
const GRACE_S = 30;
/** How long the app keeps calling out after SIGTERM (examples/k8s/caller.yaml). */
const APP_SHUTDOWN_MS = 8000;
/** lastcall's default --min-drain: without the app wait, Envoy would stop about here. */
const MIN_DRAIN_MS = 5000;

const skipReason = containerTestsSkipReason();

/** The example, injected in classic mode by the CLI, with the images built here. */
function injectedManifest(images: { lastcall: string; node: string }): string {
  const [command, ...prefix] = lastcallCommand();
  const injected = execFileSync(command, [
    ...prefix,
    "inject",
    "--mode",
    "classic",
    "-f",
    join(root, "examples/k8s/caller.yaml"),
  ], { encoding: "utf8" });
  return injected
    .replaceAll("image: lastcall:0.1.0", `image: ${images.lastcall}`)
    .replaceAll("image: node:20-bookworm-slim", `image: ${images.node}`)
    // podman 4.3 removes a finished `once` init container racily ("cannot remove container …
    // as it is running", fixed in podman 4.6): keep it instead. The kubelet needs nothing.
    // podman 4.3 reads a Deployment's annotations from its own metadata, not its template's.
    .replace(
      "metadata:\n  name: caller\nspec:",
      "metadata:\n  name: caller\n  annotations:\n    io.podman.annotations.init.container.type: always\nspec:",
    );
}

if (skipReason) {
  it.skip(`container tests: ${skipReason}`, () => {});
} else {
  describe("inject --mode classic: an app that calls out while it shuts down (podman)", () => {
    let manifest: string;
    let netns: string;
    let backend: PodScript | undefined;
    let client: PodScript | undefined;

    beforeAll(async () => {
      const images = await buildImages();
      manifest = injectedManifest(images);
      netns = await playPod(POD, "caller.yaml", manifest);
    }, 20 * 60_000);

    afterAll(async () => {
      backend?.child.kill();
      client?.child.kill();
      await removePod(POD);
    }, 120_000);

    it("wraps the app in lastcall exec --no-quit, from a copy of the binary", () => {
      expect(manifest).toContain(
        "command: [/lastcall/bin/lastcall, exec, --no-quit, --, node, /app/caller.mjs]",
      );
      expect(manifest).toContain("name: lastcall-install");
    });

    it("keeps Envoy up until the app has exited: every call out during its shutdown gets a 200", async () => {
      backend = runInPod(netns, join(root, "test/container/pod-backend.mjs"));
      await backend.next("listening", 30_000);
      // The app starts once lastcall is ready (lastcall exec waits), then says so.
      await waitFor(
        async () => ((await podman(["logs", APP])).includes('{"running":') ? true : undefined),
        { what: "the app to run", timeoutMs: 60_000 },
      );
      // Requests through the sidecar reach the app: the pod serves before it is stopped.
      client = runInPod(netns, join(root, "test/container/pod-client.mjs"), {
        listener: "http://127.0.0.1:10000",
        status: "http://127.0.0.1:15020",
        longMs: [],
        shortCount: 2,
        timeoutMs: 60_000,
      });
      await client.next("inflight", 60_000);
      expect(client.events.filter((e) => e.event === "short").map((e) => e.body)).toEqual([
        "hello from caller",
        "hello from caller",
      ]);
      await client.next("done", 60_000);

      const stopAt = Date.now();
      await podman(["pod", "stop", "-t", String(GRACE_S), POD]);

      const appLines = (await podman(["logs", APP])).split("\n").filter((line) =>
        line.startsWith("{")
      ).map((line) => JSON.parse(line));
      const calls = appLines.filter((l) => l.call).map((l) => l.call);
      const done = appLines.find((l) => l.done)?.done;
      // The app called out for its whole shutdown, past the point where a floor-only drain ends.
      expect(done).toEqual({ calls: calls.length, failed: 0 });
      expect(calls.filter((c) => c.status !== 200)).toEqual([]);
      expect(Math.max(...calls.map((c) => c.ended)) - stopAt).toBeGreaterThan(MIN_DRAIN_MS + 1000);
      // Every call reached the backend through Envoy.
      expect(backend.events.filter((e) => e.event === "request").map((e) => e.path)).toEqual(
        calls.map((c) => `/work?i=${c.i}`),
      );

      const app = await containerState(APP);
      const sidecar = await containerState(SIDECAR);
      expect(app.exitCode).toBe(0);
      expect(sidecar.exitCode).toBe(0);
      const events = await lastcallEvents(SIDECAR);
      const at = (name: string, match: (e: Record<string, unknown>) => boolean = () => true) => {
        const found = events.find((e) => e.event === name && match(e));
        expect(found, `lastcall event ${name}`).toBeDefined();
        return Date.parse(found!.ts);
      };
      expect(events.find((e) => e.event === "start")).toMatchObject({
        filter_outbound: ["outbound_backend"],
      });
      expect(events.find((e) => e.event === "app_wait")).toMatchObject({ via: "lastcall exec" });
      expect(events.find((e) => e.event === "terminated")).toMatchObject({
        mode: "inflight",
        reason: "inflight_zero",
        inflight_at_stop: 0,
      });
      // SIGTERM → the drain → the floor passes with the app still calling → the app exits →
      // the drain ends → the sidecar exits, right after the app and long before the grace period.
      expect(at("terminate")).toBeGreaterThanOrEqual(stopAt);
      expect(at("app_wait")).toBeGreaterThanOrEqual(at("drain_start") + MIN_DRAIN_MS - 50);
      expect(at("app_exited", (e) => e.running === 0)).toBeGreaterThan(at("app_wait"));
      expect(at("drain_wait_done")).toBeGreaterThanOrEqual(
        at("app_exited", (e) => e.running === 0),
      );
      expect(at("app_exited", (e) => e.running === 0) - stopAt).toBeGreaterThan(
        APP_SHUTDOWN_MS - 500,
      );
      expect(sidecar.finishedAt).toBeGreaterThanOrEqual(app.finishedAt);
      expect(sidecar.finishedAt - app.finishedAt).toBeLessThan(3000);
      expect(sidecar.finishedAt - stopAt).toBeLessThan((GRACE_S * 1000) / 2);
      expect(readFileSync(join(root, "examples/k8s/caller.yaml"), "utf8")).toContain(
        `for ${APP_SHUTDOWN_MS / 1000} s calls its backend`,
      );
    });
  });
}
