// A Service's ClusterIP from the node: waiting for it to answer, and what kube-proxy programmed
// for it when it does not.
import { existsSync, readFileSync } from "node:fs";
import http from "node:http";
import { join } from "node:path";
import type { KubeCluster } from "./kube.ts";
import { runCommand } from "./kube-process.ts";
import { waitFor } from "./envoy.ts";

/** How long the ClusterIP may refuse before kube-proxy is restarted (it answers within ~1 s). */
const BEFORE_RESTART_MS = 30_000;
/** How long it may refuse after the restart. */
const AFTER_RESTART_MS = 90_000;

/** One answer to `GET /`: its status, and who sent it when it is not a 200. */
interface Answer {
  status: number;
  /** The Server header and the start of the body, for a status that is not 200. */
  who: string;
}

/**
 * `GET url/` on a connection of its own, closed after the answer. A pooled keep-alive
 * connection opened before kube-proxy's rules were in place was never DNATed: it goes on along
 * the node's route, and whatever answers there keeps answering on it (this machine's egress
 * says 404, `server: keryx`), however often the rules are written again.
 */
function getOnce(url: string, timeoutMs: number): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const request = http.get(`${url}/`, { agent: false, timeout: timeoutMs }, (response) => {
      let body = "";
      response.setEncoding("utf8");
      response.on("data", (chunk) => (body += chunk));
      response.on("end", () => {
        const server = response.headers.server;
        const who = response.statusCode === 200
          ? ""
          : `${server ? ` from server "${server}"` : ""}${
            body.trim() ? `: ${JSON.stringify(body.trim().slice(0, 80))}` : ""
          }`;
        resolve({ status: response.statusCode ?? 0, who });
      });
      response.on("error", reject);
    });
    request.on("timeout", () => request.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    request.on("error", reject);
  });
}

/**
 * Waits for a Service's ClusterIP `url` to answer 200, as kube-proxy programs it a moment after
 * the EndpointSlice, each try on a new connection ({@linkcode getOnce}). After 30 s without it
 * this prints what the node does with the address and kube-proxy's log, restarts kube-proxy (it
 * lists everything anew), and waits again; a failure says the same.
 *
 * @example
 * ```ts
 * await serviceAnswers(cluster, "http://10.246.128.10");
 * ```
 */
export async function serviceAnswers(cluster: KubeCluster, url: string): Promise<void> {
  const ip = new URL(url).hostname;
  let last = "";
  const ok = async () => {
    const answer = await getOnce(url, 2000).catch((e: Error & { code?: string }) => {
      last = `${e.message} ${e.code ?? ""}`.trim();
      throw e;
    });
    last = `status ${answer.status}${answer.who}`;
    return answer.status === 200 ? true : undefined;
  };
  const what = `${url} to answer`;
  try {
    await waitFor(ok, { timeoutMs: BEFORE_RESTART_MS, intervalMs: 100, what });
    return;
  } catch (error) {
    console.log(
      `${(error as Error).message} (last: ${last}): restarting kube-proxy\n${await serviceState(
        cluster,
        ip,
      )}`,
    );
  }
  await cluster.restartKubeProxy();
  try {
    await waitFor(ok, { timeoutMs: AFTER_RESTART_MS, intervalMs: 100, what });
    console.log(`${url} answered after kube-proxy was restarted`);
  } catch (error) {
    throw new Error(
      `${(error as Error).message}, kube-proxy restarted once (last: ${last})\n${await serviceState(
        cluster,
        ip,
      )}`,
    );
  }
}

/**
 * What the node does with a ClusterIP: the EndpointSlices of every Service, the nat OUTPUT and
 * PREROUTING jumps, the route to the address, kube-proxy's nat chain for it and its DNAT targets, filter rules naming it (a REJECT: no endpoints in
 * kube-proxy's view), and the end of kube-proxy's log.
 *
 * @example
 * ```ts
 * console.log(await serviceState(cluster, "10.246.128.10"));
 * ```
 */
export async function serviceState(cluster: KubeCluster, ip: string): Promise<string> {
  const nat = (await runCommand("iptables-save", ["-t", "nat"])).stdout.split("\n");
  const filter = (await runCommand("iptables-save", ["-t", "filter"])).stdout.split("\n");
  const chainsOf = (lines: string[], pattern: RegExp) =>
    lines.map((l) => pattern.exec(l)?.[1]).filter((c): c is string => c !== undefined);
  const services = chainsOf(nat.filter((l) => l.includes(`${ip}/32`)), / -j (KUBE-SVC-\S+)/);
  const rulesOf = (chains: string[]) =>
    nat.filter((l) => chains.some((c) => l.startsWith(`-A ${c} `)));
  const endpoints = chainsOf(rulesOf(services), / -j (KUBE-SEP-\S+)/);
  const slices = await cluster.kubectl([
    "get",
    "endpointslices",
    "-A",
    "-o",
    "jsonpath={range .items[*]}{.metadata.name} ports={.ports[*].port}: {range .endpoints[*]}{.addresses[0]} ready={.conditions.ready} {end}\n{end}",
  ]).catch(String);
  const routed = await runCommand("ip", ["route", "get", ip]);
  const route = (routed.stdout || routed.stderr).trim();
  return [
    `EndpointSlices:\n${slices.trimEnd()}`,
    // Without kube-proxy's jumps here a connection from the node is never DNATed: it leaves by
    // the route below, and whatever is there answers.
    `nat OUTPUT and PREROUTING:\n${
      nat.filter((l) => /^-A (OUTPUT|PREROUTING) /.test(l)).join("\n") || "no rules"
    }`,
    `route to ${ip}: ${route}`,
    `nat rules naming ${ip} and its service chain:`,
    ...nat.filter((l) => l.includes(ip)),
    ...rulesOf([...services, ...endpoints]),
    `filter rules naming ${ip}: ${filter.filter((l) => l.includes(ip)).join("\n") || "none"}`,
    `kube-proxy log, last lines:\n${kubeProxyLog(cluster)}`,
  ].join("\n");
}

/** The last 25 lines of kube-proxy's log file in the cluster's folder. */
function kubeProxyLog(cluster: KubeCluster): string {
  const log = join(cluster.dir, "log", "kube-proxy.log");
  return existsSync(log)
    ? readFileSync(log, "utf8").trimEnd().split("\n").slice(-25).join("\n")
    : "";
}
