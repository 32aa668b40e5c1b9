// Contour's Envoy pod shape with lastcall's image, played by podman with the kubelet's termination
// order: nothing in flight is lost.
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import YAML from "yaml";
import { buildImages } from "../../build/image.mjs";
import { contourDaemonSet } from "../support/contour-example.ts";
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

const POD = "envoy";
const MANAGER = `${POD}-shutdown-manager`;
const ENVOY = `${POD}-envoy`;
/** The long requests in flight when the pod starts terminating. */
const LONG_MS = [2000, 4000, 6000];

const skipReason = containerTestsSkipReason();

/** Envoy's config, where Contour's bootstrap would point it at Contour: admin on the socket. */
const ENVOY_CONFIG = {
  admin: { address: { pipe: { path: "/admin/admin.sock" } } },
  static_resources: {
    listeners: [{
      name: "ingress_http",
      address: { socket_address: { address: "0.0.0.0", port_value: 8080 } },
      filter_chains: [{
        filters: [{
          name: "envoy.filters.network.http_connection_manager",
          typed_config: {
            "@type":
              "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
            stat_prefix: "ingress_http",
            route_config: {
              virtual_hosts: [{
                name: "backend",
                domains: ["*"],
                routes: [{ match: { prefix: "/" }, route: { cluster: "backend", timeout: "0s" } }],
              }],
            },
            http_filters: [{
              name: "envoy.filters.http.router",
              typed_config: {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router",
              },
            }],
          },
        }],
      }],
    }],
    clusters: [{
      name: "backend",
      type: "STATIC",
      connect_timeout: "1s",
      load_assignment: {
        cluster_name: "backend",
        endpoints: [{
          lb_endpoints: [{
            endpoint: { address: { socket_address: { address: "127.0.0.1", port_value: 9090 } } },
          }],
        }],
      },
    }],
  },
};

/**
 * The example as podman 4.3 can play it: the DaemonSet's pod template as a Pod, the local
 * images, the static config in a ConfigMap in place of `contour bootstrap`, no certificates
 * (no xDS), no host ports (the pod has only its loopback), the namespace written in.
 */
function playableManifest(images: { lastcall: string }): { text: string; grace: number } {
  const { daemonSet, spec } = contourDaemonSet("contour-envoy-config", images.lastcall);
  for (const c of spec.containers) {
    delete c.ports;
    // podman 4.3 resolves no fieldRef to the namespace: the value the kubelet would give.
    for (const e of c.env ?? []) {
      if (e.valueFrom?.fieldRef?.fieldPath === "metadata.namespace") {
        e.value = daemonSet.metadata.namespace, delete e.valueFrom;
      }
    }
  }
  const pod = {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name: POD,
      namespace: daemonSet.metadata.namespace,
      labels: daemonSet.spec.template.metadata.labels,
    },
    spec,
  };
  const config = {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: { name: "contour-envoy-config" },
    data: { "envoy.json": JSON.stringify(ENVOY_CONFIG, null, 2) },
  };
  return {
    text: `${YAML.stringify(pod)}---\n${YAML.stringify(config)}`,
    grace: spec.terminationGracePeriodSeconds,
  };
}

if (skipReason) {
  it.skip(`container tests: ${skipReason}`, () => {});
} else {
  describe("Contour's Envoy pod with lastcall's image (podman)", () => {
    let netns: string;
    let grace: number;
    const scripts: PodScript[] = [];

    beforeAll(async () => {
      const images = await buildImages();
      const manifest = playableManifest(images);
      grace = manifest.grace;
      netns = await playPod(POD, "contour.yaml", manifest.text);
    }, 20 * 60_000);

    afterAll(async () => {
      for (const s of scripts) s.child.kill();
      await removePod(POD);
    }, 120_000);

    it("answers every request in flight through Contour's termination sequence", async () => {
      const backend = runInPod(netns, join(root, "test/container/pod-backend.mjs"));
      scripts.push(backend);
      await backend.next("listening", 30_000);
      const client = runInPod(netns, join(root, "test/container/pod-client.mjs"), {
        listener: "http://127.0.0.1:8080",
        status: "http://127.0.0.1:15020",
        longMs: LONG_MS,
        shortCount: 2,
        timeoutMs: 60_000,
      });
      scripts.push(client);
      await client.next("inflight", 60_000);

      // The kubelet: both preStop hooks at once; each container's SIGTERM once its hook returned.
      const stopAt = Date.now();
      const stop = async (container: string) => {
        const left = Math.max(1, Math.round(grace - (Date.now() - stopAt) / 1000));
        await podman(["stop", "-t", String(left), container]);
        return Date.now();
      };
      let shutdownOutput = "";
      const managerHook = podman(["exec", MANAGER, "lastcall", "shutdown"]).then((output) => {
        shutdownOutput = output;
        return Date.now();
      });
      const envoyHook = runInPod(netns, join(root, "test/container/pod-get.mjs"), {
        url: "http://127.0.0.1:8090/shutdown",
      });
      scripts.push(envoyHook);
      const [managerHookDone, envoyHookAnswer] = await Promise.all([
        managerHook,
        envoyHook.next("answered", grace * 1000),
      ]);
      await Promise.all([stop(MANAGER), stop(ENVOY)]);
      const done = await client.next("done", 60_000);

      const responses = client.events.filter((e) => e.event === "response");
      expect(client.events.filter((e) => e.event === "short").map((e) => e.status)).toEqual([
        200,
        200,
      ]);
      expect(responses.filter((e) => !e.ok)).toEqual([]);
      expect(responses).toHaveLength(LONG_MS.length);
      expect(done.failed).toBe(0);
      expect(envoyHookAnswer.status).toBe(200);

      const lastResponse = Math.max(...responses.map((e) => e.t));
      const lastAnswerFloor = Math.max(...responses.map((e) => Number(e.started) + Number(e.ms)));
      const managerEvents = await lastcallEvents(MANAGER);
      const envoyEvents = await lastcallEvents(ENVOY);
      const envoy = await containerState(ENVOY);
      const manager = await containerState(MANAGER);
      // `lastcall shutdown` counted requests in flight through the filter, and let the
      // preStop return only after the last one.
      expect(managerEvents.find((e) => e.event === "shutdown_ready")).toBeDefined();
      expect(managerHookDone).toBeGreaterThanOrEqual(lastAnswerFloor);
      expect(envoyHookAnswer.t).toBeGreaterThanOrEqual(lastAnswerFloor);
      // `lastcall shutdown` started the drain of lastcall run beside Envoy too, so the SIGTERM
      // after the hooks found it done: Envoy stopped at once, with nothing in flight.
      const shutdownEvents = shutdownOutput.split("\n").filter((line) => line.startsWith("{")).map((
        line,
      ) => JSON.parse(line));
      expect(shutdownEvents.filter((e) => e.event === "open_count").at(-1)).toMatchObject({
        what: "inflight_requests",
        count: 0,
      });
      expect(shutdownEvents.find((e) => e.event === "agent_drain")).toMatchObject({ status: 200 });
      expect(envoyEvents.filter((e) => e.event === "drain_start").map((e) => e.source)).toEqual([
        "POST /drain",
      ]);
      expect(envoyEvents.find((e) => e.event === "terminated")).toMatchObject({
        reason: "inflight_zero",
        inflight_at_stop: 0,
      });
      expect(envoy.finishedAt - Math.max(managerHookDone, envoyHookAnswer.t)).toBeLessThan(3000);
      expect(envoy.exitCode).toBe(0);
      expect(manager.exitCode).toBe(0);
      expect(envoy.finishedAt).toBeGreaterThanOrEqual(lastResponse);
      expect(envoy.finishedAt - stopAt).toBeLessThan((grace * 1000) / 2);
      // For the closing note: the times of the sequence.
      console.log(
        `contour shape: last response ${lastResponse - stopAt} ms, preStop returned ${
          managerHookDone - stopAt
        } / ${envoyHookAnswer.t - stopAt} ms, envoy container exit ${
          envoy.finishedAt - stopAt
        } ms after the hooks began`,
      );
    });
  });
}
