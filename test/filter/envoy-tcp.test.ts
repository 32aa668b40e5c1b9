// The same module as a network filter in front of tcp_proxy counts connections, in the gauge its
// plugin names (the agent gives the TCP variant `lastcall_inflight_tcp`).
import { connect, createServer, type Server, type Socket } from "node:net";
import { afterEach, expect, test } from "vitest";
import { localCluster, wasmPluginConfig } from "../support/envoy-bootstrap.ts";
import { startEnvoy, stopAllEnvoys, waitFor } from "../support/envoy.ts";

let echo: Server | undefined;
afterEach(async () => {
  await stopAllEnvoys();
  await new Promise((done) => (echo ? echo.close(done) : done(undefined)));
});

function tcpBootstrap(upstreamPort: number): Record<string, unknown> {
  return {
    static_resources: {
      listeners: [{
        name: "tcp",
        address: { socket_address: { address: "127.0.0.1", port_value: 0 } },
        filter_chains: [{
          filters: [
            {
              name: "envoy.filters.network.wasm",
              typed_config: {
                "@type": "type.googleapis.com/envoy.extensions.filters.network.wasm.v3.Wasm",
                config: wasmPluginConfig({
                  vmId: "lastcall_inflight_tcp",
                  configuration: { heartbeat_ms: 0, gauge: "lastcall_inflight_tcp" },
                }),
              },
            },
            {
              name: "envoy.filters.network.tcp_proxy",
              typed_config: {
                "@type":
                  "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
                stat_prefix: "tcp",
                cluster: "echo",
              },
            },
          ],
        }],
      }],
      clusters: [localCluster("echo", upstreamPort), localCluster("lastcall_agent", 9)],
    },
  };
}

async function roundTrip(socket: Socket, text: string): Promise<void> {
  const echoed = new Promise<string>((done) => socket.once("data", (data) => done(String(data))));
  socket.write(text);
  expect(await echoed).toBe(text);
}

test("an open TCP connection counts 1 and closing it brings the count back to 0", async () => {
  echo = createServer((socket) => socket.pipe(socket));
  await new Promise<void>((done) => echo!.listen(0, "127.0.0.1", done));
  const envoy = await startEnvoy(tcpBootstrap((echo.address() as { port: number }).port), {
    concurrency: 2,
  });
  const gauge = async () =>
    (await envoy.stats("^wasmcustom\\.lastcall_"))["wasmcustom.lastcall_inflight_tcp"];

  const sockets: Socket[] = [];
  for (let i = 0; i < 3; i++) {
    const socket = connect(envoy.port("tcp"), "127.0.0.1");
    await new Promise((done) => socket.once("connect", done));
    await roundTrip(socket, `hello ${i}`);
    sockets.push(socket);
  }
  expect(await gauge()).toBe(3);
  sockets[0]!.end();
  await waitFor(async () => ((await gauge()) === 2 ? true : undefined), {
    what: "lastcall_inflight_tcp = 2",
  });
  for (const socket of sockets.slice(1)) socket.destroy();
  await waitFor(async () => ((await gauge()) === 0 ? true : undefined), {
    what: "lastcall_inflight_tcp = 0",
  });
  expect((await envoy.stats("^wasmcustom\\.lastcall_inflight$"))["wasmcustom.lastcall_inflight"])
    .toBeUndefined();
  // Heartbeats off: each VM adds its finished connections at its 1 s timer.
  await waitFor(
    async () => ((await envoy.stats("^wasmcustom\\.lastcall_streams_total$"))[
        "wasmcustom.lastcall_streams_total"
      ] === 3
      ? true
      : undefined),
    { what: "lastcall_streams_total = 3" },
  );
});
