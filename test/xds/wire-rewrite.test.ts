// The wire-level rewrite: the filter goes first in every HTTP connection manager (and the TCP
// variant before tcp_proxy), every other byte stays as it came, fields unknown to every proto
// lastcall uses included.
import { describe, expect, it } from "vitest";
import { wasmFilter } from "../../agent/envoy/bootstrap.ts";
import { encodeFilter, FilterEncodingError } from "../../agent/xds/encode-filter.ts";
import { rewriteListener } from "../../agent/xds/listener.ts";
import { LISTENER_TYPE, rewriteResponse, summarizeRequest } from "../../agent/xds/messages.ts";
import { encodeFilters } from "../../agent/xds/proxy.ts";
import {
  concat,
  lenField,
  readFields,
  stringField,
  text,
  varintField,
} from "../../agent/xds/wire.ts";

const HCM =
  "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
const TCP_PROXY = "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy";
const filter = { wasmPath: "/x/filter.wasm", pluginConfig: { instance: "7-1-0", token: "t" } };
const encoded = encodeFilters({
  socketPath: "",
  token: "",
  files: [],
  relayed: [],
  unseen: [],
  filters: { http: wasmFilter(filter), tcp: wasmFilter(filter, true) },
});

/** Field 9999 (varint 1) and field 4242 (bytes): known to no Envoy message. */
const unknown = concat([varintField(9999, 1), lenField(4242, Uint8Array.of(1, 2, 3))]);
const any = (type: string, value: Uint8Array) => concat([stringField(1, type), lenField(2, value)]);
const router = concat([
  stringField(1, "envoy.filters.http.router"),
  lenField(
    4,
    any("type.googleapis.com/envoy.extensions.filters.http.router.v3.Router", new Uint8Array()),
  ),
]);
/** An HCM: stat_prefix, an unknown field, then http_filters, then more unknown bytes. */
const hcm = (filters: Uint8Array[] = [router]) =>
  concat([
    stringField(2, "ingress"),
    unknown,
    ...filters.map((f) => lenField(5, f)),
    varintField(9998, 5),
  ]);
const networkFilter = (type: string, body: Uint8Array, name = "f") =>
  concat([stringField(1, name), lenField(4, any(type, body)), unknown]);
const chain = (...filters: Uint8Array[]) =>
  concat([unknown, ...filters.map((f) => lenField(3, f)), stringField(7, "chain")]);
const listener = (chains: Uint8Array[], extra: Uint8Array[] = []) =>
  concat([stringField(1, "l"), unknown, ...chains.map((c) => lenField(3, c)), ...extra]);

describe("rewriteListener", () => {
  it("inserts the HttpFilter first and copies every other byte, unknown fields included", () => {
    const input = listener([chain(networkFilter(HCM, hcm()))]);
    const out = rewriteListener(input, encoded);
    // The listener had no traffic_direction: lastcall's copy ends with INBOUND (field 16 = 1).
    const expected = listener([
      chain(
        networkFilter(
          HCM,
          concat([
            stringField(2, "ingress"),
            unknown,
            lenField(5, encoded.http),
            lenField(5, router),
            varintField(9998, 5),
          ]),
        ),
      ),
    ], [varintField(16, 1)]);
    expect(Buffer.from(out.bytes).equals(Buffer.from(expected))).toBe(true);
    expect(out).toMatchObject({
      name: "l",
      http: 1,
      tcp: 0,
      outbound: false,
      direction: "unmarked",
      marked: true,
      counted: "filter",
    });
  });

  it("rewrites every filter chain and the default filter chain", () => {
    const c = chain(networkFilter(HCM, hcm()));
    const out = rewriteListener(listener([c, c], [lenField(25, c)]), encoded);
    expect(out.http).toBe(3);
  });

  it("leaves a listener that already has the filter as it is (a resend is not changed twice)", () => {
    const once = rewriteListener(listener([chain(networkFilter(HCM, hcm()))]), encoded);
    const twice = rewriteListener(once.bytes, encoded);
    expect(twice.http).toBe(0);
    expect(twice.bytes).toBe(once.bytes);
  });

  it("appends the filter to an HCM without http_filters", () => {
    const out = rewriteListener(
      listener([chain(networkFilter(HCM, stringField(2, "p")))]),
      encoded,
    );
    expect(
      Buffer.from(out.bytes).equals(
        Buffer.from(
          listener([
            chain(networkFilter(HCM, concat([stringField(2, "p"), lenField(5, encoded.http)]))),
          ], [varintField(16, 1)]),
        ),
      ),
    ).toBe(true);
  });

  it("counts an unmarked listener like an INBOUND one and marks it INBOUND; a marked one keeps its direction", () => {
    const tcpChain = chain(networkFilter(TCP_PROXY, stringField(1, "tcp")));
    const unmarked = rewriteListener(listener([tcpChain]), encoded);
    expect(unmarked).toMatchObject({
      tcp: 1,
      direction: "unmarked",
      marked: true,
      counted: "filter_tcp",
    });
    const fields = readFields(unmarked.bytes).filter((f) => f.number === 16);
    expect(fields.map((f) => f.varint)).toEqual([1]);
    // An explicit UNSPECIFIED (0) is unmarked too: the appended INBOUND is the last, so it wins.
    const zero = rewriteListener(
      listener([chain(networkFilter(HCM, hcm()))], [varintField(16, 0)]),
      encoded,
    );
    expect(zero).toMatchObject({ marked: true, counted: "filter" });
    expect(readFields(zero.bytes).filter((f) => f.number === 16).map((f) => f.varint)).toEqual([
      0,
      1,
    ]);
    const inbound = rewriteListener(
      listener([chain(networkFilter(HCM, hcm()))], [varintField(16, 1)]),
      encoded,
    );
    expect(inbound).toMatchObject({ direction: "INBOUND", marked: false, counted: "filter" });
    expect(readFields(inbound.bytes).filter((f) => f.number === 16).map((f) => f.varint)).toEqual([
      1,
    ]);
    // A listener that needs neither (marked, filter there) is sent as it came.
    expect(rewriteListener(inbound.bytes, encoded).bytes).toBe(inbound.bytes);
    expect(rewriteListener(inbound.bytes, encoded).counted).toBe("filter");
    // Nothing to count: still marked, so Envoy's inbound-only drain drains it.
    expect(
      rewriteListener(
        listener([chain(networkFilter("type.googleapis.com/x.Echo", new Uint8Array()))]),
        encoded,
      ),
    ).toMatchObject({ http: 0, tcp: 0, marked: true, counted: "not_counted" });
  });

  it("puts the TCP variant before tcp_proxy in inbound chains only", () => {
    const tcpChain = chain(networkFilter(TCP_PROXY, stringField(1, "tcp")));
    const inbound = rewriteListener(listener([tcpChain], [varintField(16, 1)]), encoded);
    expect(inbound.tcp).toBe(1);
    const chainOut = readFields(readFields(inbound.bytes).filter((f) => f.number === 3)[0].value)
      .filter((f) => f.number === 3);
    expect(Buffer.from(chainOut[0].value).equals(Buffer.from(encoded.tcp))).toBe(true);
    const outbound = rewriteListener(listener([tcpChain], [varintField(16, 2)]), encoded);
    expect(outbound).toMatchObject({
      tcp: 0,
      outbound: true,
      marked: false,
      counted: "not_counted",
    });
    expect(outbound.bytes).toEqual(listener([tcpChain], [varintField(16, 2)]));
  });

  it("gives outbound HTTP listeners the filter (counted, not drained)", () => {
    expect(
      rewriteListener(listener([chain(networkFilter(HCM, hcm()))], [varintField(16, 2)]), encoded),
    ).toMatchObject({ http: 1, counted: "filter_outbound" });
  });

  it("refuses bytes that are not protobuf", () => {
    expect(() => rewriteListener(Uint8Array.of(0x0a, 0x05, 1), encoded)).toThrow(
      /runs past the end/,
    );
  });
});

describe("rewriteResponse", () => {
  const l = listener([chain(networkFilter(HCM, hcm()))]);
  const sotw = (type: string, resources: Uint8Array[]) =>
    concat([
      stringField(1, "v1"),
      ...resources.map((r) => lenField(2, r)),
      stringField(4, type),
      stringField(5, "n1"),
      unknown,
    ]);

  it("rewrites Listener resources of a SotW response and keeps its other fields", () => {
    const out = rewriteResponse(sotw(LISTENER_TYPE, [any(LISTENER_TYPE, l)]), "sotw", encoded);
    expect(out.nonce).toBe("n1");
    expect(out.listeners.map((x) => x.http)).toEqual([1]);
    expect(
      Buffer.from(out.bytes).equals(
        Buffer.from(sotw(LISTENER_TYPE, [any(LISTENER_TYPE, rewriteListener(l, encoded).bytes)])),
      ),
    ).toBe(true);
  });

  it("passes other types unchanged, byte for byte", () => {
    const cluster = sotw("type.googleapis.com/envoy.config.cluster.v3.Cluster", [
      any("type.googleapis.com/envoy.config.cluster.v3.Cluster", stringField(1, "c")),
    ]);
    expect(rewriteResponse(cluster, "sotw", encoded).bytes).toBe(cluster);
  });

  it("rewrites listeners wrapped in a Resource (SotW with TTL) and delta responses", () => {
    const resource = (inner: Uint8Array) =>
      concat([
        stringField(1, "ver"),
        lenField(2, any(LISTENER_TYPE, inner)),
        stringField(3, "l"),
        unknown,
      ]);
    const wrapped = rewriteResponse(
      sotw(LISTENER_TYPE, [
        any("type.googleapis.com/envoy.service.discovery.v3.Resource", resource(l)),
      ]),
      "sotw",
      encoded,
    );
    expect(wrapped.listeners.map((x) => x.http)).toEqual([1]);
    const delta = concat([
      stringField(1, "sys"),
      lenField(2, resource(l)),
      stringField(4, LISTENER_TYPE),
      stringField(5, "n2"),
      stringField(6, "gone"),
    ]);
    const out = rewriteResponse(delta, "delta", encoded);
    expect(out.nonce).toBe("n2");
    expect(
      Buffer.from(out.bytes).equals(
        Buffer.from(
          concat([
            stringField(1, "sys"),
            lenField(2, resource(rewriteListener(l, encoded).bytes)),
            stringField(4, LISTENER_TYPE),
            stringField(5, "n2"),
            stringField(6, "gone"),
          ]),
        ),
      ),
    ).toBe(true);
  });
});

describe("summarizeRequest", () => {
  it("reads the NACK of a SotW and of a delta request", () => {
    const status = concat([
      varintField(1, 13),
      stringField(2, "Error adding/updating listener(s) l: bad"),
    ]);
    expect(
      summarizeRequest(
        concat([
          stringField(1, "v"),
          stringField(4, LISTENER_TYPE),
          stringField(5, "n1"),
          lenField(6, status),
        ]),
        "sotw",
      ),
    )
      .toEqual({
        typeUrl: LISTENER_TYPE,
        responseNonce: "n1",
        error: { code: 13, message: "Error adding/updating listener(s) l: bad" },
      });
    expect(summarizeRequest(concat([stringField(2, LISTENER_TYPE), stringField(6, "n2")]), "delta"))
      .toEqual({ typeUrl: LISTENER_TYPE, responseNonce: "n2" });
  });
});

describe("encodeFilter", () => {
  it("encodes the HttpFilter of wasmFilter() with Envoy's field numbers", () => {
    const fields = readFields(encoded.http);
    expect(text(fields[0].value)).toBe("lastcall_inflight");
    const typed = readFields(fields[1].value);
    expect(fields[1].number).toBe(4);
    expect(text(typed[0].value)).toBe(
      "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm",
    );
    const plugin = readFields(readFields(typed[1].value)[0].value);
    expect(plugin.map((f) => f.number)).toEqual([1, 2, 3, 4, 7]);
    expect(plugin.at(-1)!.varint).toBe(3); // FAIL_OPEN
    const configuration = readFields(plugin[3].value);
    expect(JSON.parse(text(readFields(configuration[1].value)[0].value))).toEqual(
      filter.pluginConfig,
    );
  });

  it("refuses a key its schema lacks, naming it", () => {
    const json = wasmFilter(filter) as { typed_config: { config: Record<string, unknown> } };
    json.typed_config.config.new_setting = true;
    expect(() => encodeFilter(json)).toThrow(FilterEncodingError);
    expect(() => encodeFilter(json)).toThrow(/filter\.typed_config\.config\.new_setting/);
  });
});
