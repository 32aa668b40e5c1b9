// How each listener kind's delivery is checked (the rule of `listeners[].delivery`), and the
// parsers the delivery wait reads: Envoy's buffer stats and /proc/net/unix.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { type DeliveryCheck, deliveryOf } from "../../agent/envoy/delivery-check.ts";
import { parseUnixTable } from "../../agent/envoy/sockets.ts";
import { envoyBuffers } from "../../agent/envoy/stats.ts";
import { rewriteListener } from "../../agent/xds/listener.ts";
import { lenField, stringField, varintField } from "../../agent/xds/wire.ts";

const RANK: DeliveryCheck[] = ["tcp_queue", "envoy_buffers", "unchecked"];
const kinds = {
  tcp: { json: { socket_address: { address: "0.0.0.0", port_value: 8080 } }, check: "tcp_queue" },
  udp: {
    json: { socket_address: { address: "0.0.0.0", port_value: 443, protocol: "UDP" } },
    check: "unchecked",
  },
  pipe: { json: { pipe: { path: "/run/app.sock" } }, check: "envoy_buffers" },
  internal: {
    json: { envoy_internal_address: { server_listener_name: "x" } },
    check: "envoy_buffers",
  },
} as const;
type Kind = keyof typeof kinds;
const kindArb = fc.constantFrom(...(Object.keys(kinds) as Kind[]));

describe("deliveryOf", () => {
  it("takes the weakest check of a listener's addresses (property)", () => {
    fc.assert(fc.property(kindArb, fc.array(kindArb, { maxLength: 3 }), (main, extra) => {
      const listener = {
        address: kinds[main].json,
        additional_addresses: extra.map((k) => ({ address: kinds[k].json })),
      };
      const worst = [main, ...extra].map((k) => kinds[k].check).reduce((
        a,
        b,
      ) => (RANK.indexOf(b) > RANK.indexOf(a) ? b : a));
      expect(deliveryOf(listener)).toBe(worst);
    }));
  });

  it("reads a udp_listener_config (QUIC) as unchecked, whatever the address says", () => {
    expect(deliveryOf({ address: kinds.tcp.json, udp_listener_config: { quic_options: {} } })).toBe(
      "unchecked",
    );
  });

  it("reads the same from a Listener on the wire (LDS over gRPC)", () => {
    const pipeAddress = lenField(2, stringField(1, "/run/app.sock")); // Address.pipe
    const pipe = lenField(2, pipeAddress); // Listener.address
    const udp = lenField(2, lenField(1, varintField(1, 1)));
    const tcp = lenField(2, lenField(1, stringField(2, "0.0.0.0")));
    const filters = { http: new Uint8Array(), tcp: new Uint8Array(), httpName: "h", tcpName: "t" };
    const delivery = (...fields: Uint8Array[]) =>
      rewriteListener(Uint8Array.from(fields.flatMap((f) => [...f])), filters).delivery;
    expect(delivery(stringField(1, "a"), tcp)).toBe("tcp_queue");
    expect(delivery(stringField(1, "a"), pipe)).toBe("envoy_buffers");
    expect(delivery(stringField(1, "a"), udp)).toBe("unchecked");
    expect(delivery(stringField(1, "a"), tcp, lenField(18, new Uint8Array()))).toBe("unchecked");
    expect(delivery(stringField(1, "a"), tcp, lenField(33, lenField(1, pipeAddress)))).toBe(
      "envoy_buffers",
    );
  });
});

describe("envoyBuffers", () => {
  it("sums HTTP/2 pending and write buffers, not the admin's; counts h2, h3 connections", () => {
    expect(envoyBuffers([
      { name: "http2.pending_send_bytes", value: 18_000 },
      { name: "http.ingress.downstream_cx_tx_bytes_buffered", value: 1_000_000 },
      { name: "tcp.db.downstream_cx_tx_bytes_buffered", value: 7 },
      { name: "http.admin.downstream_cx_tx_bytes_buffered", value: 500 },
      { name: "http.quic.downstream_cx_http3_active", value: 2 },
      { name: "http.ingress.downstream_cx_http2_active", value: 3 },
      { name: "http.admin.downstream_cx_http2_active", value: 1 },
      { name: "http.egress.downstream_cx_http2_active", value: 4 },
      { name: "http.ingress.downstream_cx_delayed_close_timeout", value: 5 },
    ], new Set(["ingress"]))).toEqual({
      bytes: 1_018_007,
      http2Connections: 7,
      http2Of: 3,
      http3Connections: 2,
      delayedCloseTimeouts: 5,
    });
  });

  it("counts the HTTP/2 connections of every connection manager when no prefix is given", () => {
    const stats = [{ name: "http.a.b.downstream_cx_http2_active", value: 2 }];
    expect(envoyBuffers(stats).http2Of).toBe(2);
    expect(envoyBuffers(stats, new Set(["a.b"])).http2Of).toBe(2);
    expect(envoyBuffers(stats, new Set(["a"])).http2Of).toBe(0);
  });
});

describe("parseUnixTable", () => {
  const HEADER = "Num       RefCount Protocol Flags    Type St Inode Path\n";
  const row = (s: { listening: boolean; inode: number; path?: string }) =>
    `0000000000000000: 00000002 00000000 ${s.listening ? "00010000" : "00000000"} 0001 ${
      s.listening ? "01" : "03"
    } ${s.inode}${s.path ? ` ${s.path}` : ""}\n`;

  it("reads back every row as the kernel writes it (property)", () => {
    const socket = fc.record({
      listening: fc.boolean(),
      inode: fc.integer({ min: 1, max: 2 ** 32 }),
      path: fc.option(fc.stringMatching(/^[@/][a-z0-9/._ -]{0,40}[a-z0-9]$/), { nil: undefined }),
    });
    fc.assert(fc.property(fc.array(socket, { maxLength: 20 }), (sockets) => {
      const parsed = parseUnixTable(HEADER + sockets.map(row).join(""));
      expect(parsed).toEqual(
        sockets.map((s) => ({
          listening: s.listening,
          inode: s.inode,
          ...(s.path ? { path: s.path } : {}),
        })),
      );
    }));
  });
});
