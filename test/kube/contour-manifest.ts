// Contour's Envoy DaemonSet (examples/k8s/contour-envoy.yaml) as the real-kubelet test applies it:
// lastcall's local image, a static Envoy config in a ConfigMap where `contour bootstrap` and
// Contour's xDS would give it, no certificates, no hostPorts; with a Service in front.
import YAML from "yaml";
import { contourDaemonSet } from "../support/contour-example.ts";
import { ROUTER } from "../support/envoy-bootstrap.ts";

/** The namespace the DaemonSet, its config and its Service are applied in. */
export const NS = "projectcontour";

/** Envoy's config where `contour bootstrap` and Contour's xDS would give it: admin on the socket. */
function envoyConfig(demoIp: string) {
  const listener = (name: string, port: number, routes: Array<[string, string]>) => ({
    name,
    address: { socket_address: { address: "0.0.0.0", port_value: port } },
    filter_chains: [{
      filters: [{
        name: "envoy.filters.network.http_connection_manager",
        typed_config: {
          "@type":
            "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
          stat_prefix: name,
          http_filters: [ROUTER],
          route_config: {
            virtual_hosts: [{
              name,
              domains: ["*"],
              routes: routes.map(([prefix, cluster]) => ({
                match: { prefix },
                route: { cluster, timeout: "0s" },
              })),
            }],
          },
        },
      }],
    }],
  });
  const cluster = (name: string, address: object) => ({
    name,
    type: "STATIC",
    connect_timeout: "1s",
    load_assignment: {
      cluster_name: name,
      endpoints: [{ lb_endpoints: [{ endpoint: { address } }] }],
    },
  });
  return {
    admin: { address: { pipe: { path: "/admin/admin.sock" } } },
    static_resources: {
      listeners: [
        listener("ingress_http", 8080, [["/", "demo"]]),
        listener("stats-health", 8002, [["/ready", "envoy-admin"], ["/stats", "envoy-admin"]]),
      ],
      clusters: [
        cluster("demo", { socket_address: { address: demoIp, port_value: 80 } }),
        cluster("envoy-admin", { pipe: { path: "/admin/admin.sock" } }),
      ],
    },
  };
}

/** The example's DaemonSet adapted as said above, its config, ServiceAccount and a Service. */
export function contourManifest(image: string, demoIp: string): { text: string; grace: number } {
  const { daemonSet, spec } = contourDaemonSet("envoy-config", image);
  for (const c of spec.containers) for (const p of c.ports ?? []) delete p.hostPort;
  const docs = [
    { apiVersion: "v1", kind: "Namespace", metadata: { name: NS } },
    { apiVersion: "v1", kind: "ServiceAccount", metadata: { name: "envoy", namespace: NS } },
    {
      apiVersion: "v1",
      kind: "ConfigMap",
      metadata: { name: "envoy-config", namespace: NS },
      data: { "envoy.json": JSON.stringify(envoyConfig(demoIp), null, 2) },
    },
    daemonSet,
    {
      apiVersion: "v1",
      kind: "Service",
      metadata: { name: "envoy", namespace: NS },
      spec: { selector: { app: "envoy" }, ports: [{ name: "http", port: 80, targetPort: 8080 }] },
    },
  ];
  return {
    text: docs.map((d) => YAML.stringify(d)).join("---\n"),
    grace: spec.terminationGracePeriodSeconds,
  };
}
