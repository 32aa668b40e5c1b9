// lastcall reaches a control plane that requires mTLS with the certificates the bootstrap names
// for the xDS cluster: files named in the UpstreamTlsContext, or SDS files as Contour's
// bootstrap has them. Under Node, in the single executable and under Deno (grpc-js in each).
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../support/envoy.ts";
import { freePort, type Runtime, startLastcall, stopAllLastcalls } from "../support/lastcall.ts";
import { startUpstreamApp, type UpstreamApp } from "../support/upstream-app.ts";
import {
  buildXdsServer,
  makeCertificates,
  startXdsServer,
  stopAllXdsServers,
} from "../support/xds-server/index.ts";
import {
  basicSnapshot,
  dumpedHttpFilters,
  get,
  xdsBootstrap,
  type XdsVariant,
} from "./resources.ts";

const TLS = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext";
let app: UpstreamApp;
let certs: ReturnType<typeof makeCertificates>;
let dir: string;
beforeAll(() => void buildXdsServer(), 300_000);
beforeAll(async () => {
  app = await startUpstreamApp();
  dir = mkdtempSync(join(tmpdir(), "lastcall-xds-tls-"));
  certs = makeCertificates(dir);
});
afterAll(() => app.close());
afterEach(async () => {
  await stopAllLastcalls();
  await stopAllXdsServers();
});

/** Certificate files named in the transport socket. */
function filesTls(): Record<string, unknown> {
  return {
    name: "envoy.transport_sockets.tls",
    typed_config: {
      "@type": TLS,
      sni: "xds.test",
      common_tls_context: {
        tls_certificates: [{
          certificate_chain: { filename: certs.clientCert },
          private_key: { filename: certs.clientKey },
        }],
        validation_context: {
          trusted_ca: { filename: certs.ca },
          match_typed_subject_alt_names: [{ san_type: "DNS", matcher: { exact: "xds.test" } }],
        },
      },
    },
  };
}

/** Contour's way: SDS secrets from files beside the bootstrap. */
function sdsTls(): Record<string, unknown> {
  const certificate = join(dir, "xds-tls-certificate.json");
  const validation = join(dir, "xds-validation-context.json");
  writeFileSync(
    certificate,
    JSON.stringify({
      resources: [{
        "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret",
        name: "contour_xds_tls_certificate",
        tls_certificate: {
          certificate_chain: { filename: certs.clientCert },
          private_key: { filename: certs.clientKey },
        },
      }],
    }),
  );
  writeFileSync(
    validation,
    JSON.stringify({
      resources: [{
        "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret",
        name: "contour_xds_tls_validation_context",
        validation_context: {
          trusted_ca: { filename: certs.ca },
          match_typed_subject_alt_names: [{
            san_type: "IP_ADDRESS",
            matcher: { exact: "127.0.0.1" },
          }],
        },
      }],
    }),
  );
  return {
    name: "tls",
    typed_config: {
      "@type": TLS,
      common_tls_context: {
        tls_params: { tls_maximum_protocol_version: "TLSv1_3" },
        tls_certificate_sds_secret_configs: [{
          name: "contour_xds_tls_certificate",
          sds_config: { path_config_source: { path: certificate }, resource_api_version: "V3" },
        }],
        validation_context_sds_secret_config: {
          name: "contour_xds_tls_validation_context",
          sds_config: { path_config_source: { path: validation }, resource_api_version: "V3" },
        },
      },
    },
  };
}

describe.each<[XdsVariant, string, Runtime]>([
  ["sotw", "certificate files", "bundle"],
  ["sotw", "certificate files", "binary"],
  ["delta", "SDS files (Contour)", "bundle"],
  ["delta", "SDS files (Contour)", "deno"],
])(
  "ADS (%s) over mTLS with %s under %s",
  (variant, _how, runtime) => {
    it("relays the control plane's listeners with the filter", async () => {
      const cp = await startXdsServer({
        tls: { cert: certs.serverCert, key: certs.serverKey, clientCa: certs.ca },
      });
      const port = await freePort();
      await cp.push(
        basicSnapshot({
          version: "1",
          listenerPort: port,
          appPort: app.port,
          service: "ads",
          variant,
        }),
      );
      const transportSocket = variant === "sotw" ? filesTls() : sdsTls();
      const lc = startLastcall(
        xdsBootstrap({ xdsPort: cp.port, service: "ads", variant, transportSocket }),
        { runtime, args: ["--min-drain", "0s"] },
      );
      await lc.event("ready", undefined, 45_000);
      await waitFor(
        async () => ((await get(port, "/").catch(() => undefined))?.status === 200
          ? true
          : undefined),
        { what: "the LDS listener to serve" },
      );
      const [filters] = await dumpedHttpFilters(lc.adminUrl(), "ingress");
      expect(filters[0].name).toBe("lastcall_inflight");
      expect(
        lc.events.some((e) =>
          e.event === "xds_upstream_failed" || e.event === "xds_upstream_ended"
        ),
      ).toBe(false);
    });
  },
);

it("does not relay to a control plane whose certificate fails the SAN matchers, as Envoy would not", async () => {
  const cp = await startXdsServer({
    tls: { cert: certs.serverCert, key: certs.serverKey, clientCa: certs.ca },
  });
  const port = await freePort();
  await cp.push(
    basicSnapshot({
      version: "1",
      listenerPort: port,
      appPort: app.port,
      service: "ads",
      variant: "sotw",
    }),
  );
  const tls = filesTls() as {
    typed_config: { common_tls_context: { validation_context: Record<string, unknown> } };
  };
  tls.typed_config.common_tls_context.validation_context.match_typed_subject_alt_names = [{
    san_type: "DNS",
    matcher: { exact: "other.test" },
  }];
  const lc = startLastcall(
    xdsBootstrap({ xdsPort: cp.port, service: "ads", variant: "sotw", transportSocket: tls }),
    { args: ["--min-drain", "0s"] },
  );
  const ended = await lc.event("xds_upstream_ended");
  expect(ended.code).toBe("UNAVAILABLE");
  expect(lc.events.some((e) => e.event === "xds_listeners")).toBe(false);
});
