// `lastcall check` on lastcall's own `inject` output and on manifests without a proxy it models
// (none, a List, Linkerd, Consul, Kuma), with the exact findings expected for each.
import { join } from "node:path";
import { beforeAll } from "vitest";
import YAML from "yaml";
import type { Json } from "../support/json.ts";
import { runLastcall } from "../support/lastcall.ts";
import {
  checkRows,
  CLASSIC_NO_PRESTOP,
  container,
  edited,
  fixturePath,
  NGINX,
  objectOf,
  root,
  type Row,
  specOf,
} from "./check-rows.ts";

const NO_PROXY = (ref: string) =>
  `${ref}: no proxy found: only the apps' preStop hooks against the grace period were checked`;
const UNMODELLED = (ref: string, name: string, what: string) =>
  `${ref}: ${name} (${what}): timing not modelled: only the apps' preStop hooks against the grace period were checked`;

/** `lastcall inject` output, made by the CLI before the rows run. */
const injected: Record<string, string> = {};
/** An inject output's workload (its first document) edited, with the rest of its documents. */
const injectedEdited = (key: string, edit: (object: Json) => void) => {
  const [first, ...rest] = YAML.parseAllDocuments(injected[key]).map((d) => d.toJS());
  edit(first);
  return [first, ...rest].map((o) => YAML.stringify(o, { version: "1.1" })).join("---\n");
};

const rows: Row[] = [
  // lastcall as `inject` prints it (made by the CLI in beforeAll).
  {
    name: "lastcall native, as inject prints it for examples/k8s/deployment.yaml: none",
    text: () => injected.native,
    findings: [],
    summary: "1 workload, 1 proxy, 0 findings",
  },
  {
    name: "lastcall classic, as inject prints it for examples/k8s/deployment.yaml: none",
    text: () => injected.classic,
    findings: [],
    summary: "1 workload, 1 proxy, 0 findings",
  },
  {
    name:
      "lastcall native, as inject prints it for an nginx Deployment without preStop: none (its preStop GET /v1/app-stop holds the SIGTERM until the drain's floor)",
    text: () => injected.nginx,
    findings: [],
    summary: "1 workload, 1 proxy, 0 findings",
  },
  {
    name: "lastcall classic, as inject prints it for an nginx Deployment without preStop: none",
    text: () => injected.nginxClassic,
    findings: [],
    summary: "1 workload, 1 proxy, 0 findings",
  },
  {
    name: "inject's nginx with the app's preStop taken away: no preStop, SIGTERM at once",
    text: () => injectedEdited("nginx", (o) => delete container(o, "nginx").lifecycle),
    findings: [
      'deployment/nginx-deployment: container "nginx" has no preStop: it gets SIGTERM at once while lastcall still takes new requests until --min-drain 5s (default): the app stops answering requests the proxy forwards; add lifecycle.preStop.sleep.seconds: 5 on container "nginx"',
    ],
    summary: "1 workload, 1 proxy, 1 finding",
  },
  {
    name:
      "inject's nginx with the app-stop hook on a port lastcall does not serve: SIGTERM at once",
    text: () =>
      injectedEdited(
        "nginx",
        (o) => (container(o, "nginx").lifecycle.preStop.httpGet.port = 15999),
      ),
    findings: [
      'deployment/nginx-deployment: container "nginx" preStop GET /v1/app-stop reaches no lastcall status server (port 15999): it gets SIGTERM at once while lastcall still takes new requests until --min-drain 5s (default): the app stops answering requests the proxy forwards; set lifecycle.preStop.sleep.seconds: 5 on container "nginx"',
    ],
    summary: "1 workload, 1 proxy, 1 finding",
  },
  {
    name:
      "inject's nginx whose native sidecar lost its preStop drain: the app-stop hook answers after 1 s, within endpoint removal",
    text: () => injectedEdited("nginx", (o) => delete container(o, "lastcall").lifecycle),
    findings: [
      "deployment/nginx-deployment: lastcall is a native sidecar without a preStop `lastcall drain`: it starts draining only after the app has exited, so keep-alive clients keep sending requests the stopping app cannot answer; add lifecycle.preStop.exec.command: [lastcall, drain]",
      'deployment/nginx-deployment: container "nginx" preStop GET /v1/app-stop ends after 1s (no drain begins), before endpoint removal is over (~3s), while lastcall (a native sidecar) still takes new requests until the app has exited: the app stops answering requests the proxy forwards; set lifecycle.preStop.sleep.seconds: 5 on container "nginx"',
    ],
    summary: "1 workload, 1 proxy, 2 findings",
  },
  // No proxy, other meshes, lists.
  {
    name: "an nginx Deployment without proxy: no proxy found, said so, not an all-clear",
    file: NGINX,
    findings: [],
    notes: [NO_PROXY("deployment/nginx-deployment")],
    summary: "1 workload, 0 proxies, 0 findings",
  },
  {
    name: "a file without any pod template",
    file: join(root, "examples/k8s/envoy-config.yaml"),
    findings: [],
    summary:
      "0 workloads, 0 proxies, 0 findings: nothing to check (no Pod, Deployment, StatefulSet, DaemonSet, Job or CronJob)",
  },
  {
    name: "kubectl get -o yaml: a kind: List of an Istio-injected Deployment and one without proxy",
    file: fixturePath("kubectl-list.yaml"),
    findings: [CLASSIC_NO_PRESTOP],
    notes: [NO_PROXY("deployment/nginx-deployment")],
    summary: "2 workloads, 1 proxy, 1 finding",
  },
  {
    name: "the API's typed list (DeploymentList) whose items have no kind",
    text: () => {
      const list = objectOf(fixturePath("kubectl-list.yaml"));
      return YAML.stringify({
        apiVersion: "apps/v1",
        kind: "DeploymentList",
        metadata: {},
        items: list.items.map(({ kind: _, ...item }: Record<string, unknown>) => item),
      });
    },
    findings: [CLASSIC_NO_PRESTOP],
    notes: [NO_PROXY("deployment/nginx-deployment")],
    summary: "2 workloads, 1 proxy, 1 finding",
  },
  {
    name: "a Deployment in Linkerd's injected shape: a proxy, its timing not modelled",
    file: fixturePath("linkerd-emojivoto.yaml"),
    findings: [],
    notes: [UNMODELLED("deployment/web", "linkerd-proxy", "Linkerd's sidecar")],
    summary: "1 workload, 1 proxy, 0 findings",
  },
  {
    name: "Consul's and Kuma's sidecars: proxies, their timing not modelled",
    text: () =>
      [
        edited(NGINX, (o) =>
          specOf(o).containers.push({
            name: "consul-dataplane",
            image: "hashicorp/consul-dataplane:1.6.1",
          })),
        edited(NGINX, (o) => {
          o.metadata.name = "kuma";
          specOf(o).containers.push({
            name: "kuma-sidecar",
            image: "docker.io/kumahq/kuma-dp:2.9.0",
            args: ["run"],
          });
        }),
      ].join("---\n"),
    findings: [],
    notes: [
      UNMODELLED("deployment/nginx-deployment", "consul-dataplane", "Consul's sidecar"),
      UNMODELLED("deployment/kuma", "kuma-sidecar", "Kuma's sidecar"),
    ],
    summary: "2 workloads, 2 proxies, 0 findings",
  },
];

beforeAll(async () => {
  const inject = async (args: string[]) => {
    const result = await runLastcall(["inject", ...args]);
    if (result.code !== 0) {
      throw new Error(`lastcall inject ${args.join(" ")} exited ${result.code}: ${result.stderr}`);
    }
    return result.stdout;
  };
  injected.native = await inject(["-f", join(root, "examples/k8s/deployment.yaml")]);
  injected.classic = await inject([
    "-f",
    join(root, "examples/k8s/deployment.yaml"),
    "--mode",
    "classic",
  ]);
  injected.nginx = await inject(["-f", NGINX]);
  injected.nginxClassic = await inject(["-f", NGINX, "--mode", "classic"]);
});

checkRows("lastcall check on lastcall's output and on manifests without a modelled proxy", rows);
