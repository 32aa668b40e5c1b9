// The connection to the original control plane, as Envoy would have made it: the cluster's address
// and TLS.
import { X509Certificate } from "node:crypto";
import { readFile } from "node:fs/promises";
import { isIP } from "node:net";
import * as grpc from "@grpc/grpc-js";
import YAML from "yaml";
import type { XdsUpstream } from "./redirect.ts";

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/** A TLS setting lastcall cannot apply, naming it. */
export class UpstreamConfigError extends Error {
  override name = "UpstreamConfigError";
}

/** How to open a channel to the control plane. */
export interface UpstreamChannel {
  /** grpc-js target (`host:port`, `unix:path`). */
  target: string;
  credentials: grpc.ChannelCredentials;
  options: grpc.ChannelOptions;
}

/** An Envoy `config.core.v3.DataSource`. */
async function readSource(source: unknown, what: string): Promise<Buffer | undefined> {
  if (source === undefined) return undefined;
  if (!isObject(source)) throw new UpstreamConfigError(`Cannot read ${what}: not a DataSource`);
  if (typeof source.filename === "string") return await readFile(source.filename);
  if (typeof source.inline_string === "string") return Buffer.from(source.inline_string);
  if (typeof source.inline_bytes === "string") return Buffer.from(source.inline_bytes, "base64");
  throw new UpstreamConfigError(
    `Cannot read ${what}: only filename, inline_string and inline_bytes are supported`,
  );
}

/** A secret from an SDS config that is a file (`path_config_source` or `path`). */
async function sdsSecret(ref: unknown, what: string): Promise<Json> {
  if (!isObject(ref)) {
    throw new UpstreamConfigError(`Cannot read ${what}: not an SDS secret config`);
  }
  const sds = isObject(ref.sds_config) ? ref.sds_config : {};
  const path = isObject(sds.path_config_source) ? sds.path_config_source.path : sds.path;
  if (typeof path !== "string") {
    throw new UpstreamConfigError(
      `Cannot read ${what} ${String(ref.name)}: only SDS from files is supported`,
    );
  }
  const parsed = YAML.parse(await readFile(path, "utf8")) as Json;
  const resources = Array.isArray(parsed?.resources) ? parsed.resources : [];
  const secret = resources.find((r) =>
    isObject(r) && (ref.name === undefined || r.name === ref.name)
  );
  if (!isObject(secret)) {
    throw new UpstreamConfigError(`Cannot read ${what}: no secret ${String(ref.name)} in ${path}`);
  }
  return secret;
}

interface TlsMaterial {
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
  sni?: string;
  validation: Json;
}

async function materialOf(tls: Json): Promise<TlsMaterial> {
  const common = isObject(tls.common_tls_context) ? tls.common_tls_context : {};
  let cert: Buffer | undefined;
  let key: Buffer | undefined;
  const certificates = Array.isArray(common.tls_certificates) ? common.tls_certificates : [];
  const sdsCertificates = Array.isArray(common.tls_certificate_sds_secret_configs)
    ? common.tls_certificate_sds_secret_configs
    : [];
  const certificate = isObject(certificates[0])
    ? certificates[0]
    : sdsCertificates[0] !== undefined
    ? (await sdsSecret(sdsCertificates[0], "client certificate")).tls_certificate
    : undefined;
  if (isObject(certificate)) {
    cert = await readSource(certificate.certificate_chain, "certificate_chain");
    key = await readSource(certificate.private_key, "private_key");
  }
  let validation: unknown = common.validation_context;
  const combined = isObject(common.combined_validation_context)
    ? common.combined_validation_context
    : undefined;
  if (combined) {
    validation = {
      ...(isObject(combined.default_validation_context) ? combined.default_validation_context : {}),
    };
  }
  const sdsValidation = combined?.validation_context_sds_secret_config ??
    common.validation_context_sds_secret_config;
  if (sdsValidation !== undefined) {
    const secret = await sdsSecret(sdsValidation, "validation context");
    validation = {
      ...(isObject(validation) ? validation : {}),
      ...(isObject(secret.validation_context) ? secret.validation_context : {}),
    };
  }
  const v = isObject(validation) ? validation : {};
  return {
    ca: await readSource(v.trusted_ca, "trusted_ca"),
    cert,
    key,
    sni: typeof tls.sni === "string" && tls.sni ? tls.sni : undefined,
    validation: v,
  };
}

function stringMatch(matcher: Json, value: string): boolean {
  const fold = matcher.ignore_case === true ? (s: string) => s.toLowerCase() : (s: string) => s;
  const v = fold(value);
  if (typeof matcher.exact === "string") return v === fold(matcher.exact);
  if (typeof matcher.prefix === "string") return v.startsWith(fold(matcher.prefix));
  if (typeof matcher.suffix === "string") return v.endsWith(fold(matcher.suffix));
  if (typeof matcher.contains === "string") return v.includes(fold(matcher.contains));
  if (isObject(matcher.safe_regex) && typeof matcher.safe_regex.regex === "string") {
    return new RegExp(`^(?:${matcher.safe_regex.regex})$`).test(value);
  }
  return false;
}

const SAN_PREFIX: Record<string, string> = {
  DNS: "DNS",
  URI: "URI",
  EMAIL: "email",
  IP_ADDRESS: "IP Address",
};

/**
 * Envoy checks the server's names only when the validation context has SAN matchers; without
 * them only the chain is verified. The same here.
 */
export function sanCheck(
  validation: Json,
): ((host: string, cert: { raw: Buffer }) => Error | undefined) | undefined {
  const typed = Array.isArray(validation.match_typed_subject_alt_names)
    ? validation.match_typed_subject_alt_names.filter(isObject)
    : [];
  const plain = Array.isArray(validation.match_subject_alt_names)
    ? validation.match_subject_alt_names.filter(isObject)
    : [];
  if (typed.length === 0 && plain.length === 0) return () => undefined;
  return (_host, cert) => {
    const sans = (new X509Certificate(cert.raw).subjectAltName ?? "").split(/,\s*/).map((s) => {
      const at = s.indexOf(":");
      return { kind: s.slice(0, at), value: s.slice(at + 1) };
    });
    const ok =
      typed.some((m) =>
        sans.some((s) =>
          s.kind === SAN_PREFIX[String(m.san_type)] && isObject(m.matcher) &&
          stringMatch(m.matcher, s.value)
        )
      ) ||
      plain.some((m) => sans.some((s) => stringMatch(m, s.value)));
    return ok
      ? undefined
      : new Error(`Control plane certificate names ${
        sans.map((s) => `${s.kind}:${s.value}`).join(", ")
      } match no subject_alt_names matcher`);
  };
}

/**
 * Reads what a channel to the control plane needs (certificate files included).
 *
 * @example
 * ```ts
 * const { target, credentials, options } = await upstreamChannel(plan.upstream);
 * const client = new grpc.Client(target, credentials, options);
 * ```
 * @throws {UpstreamConfigError} or a file error when TLS material cannot be read
 */
export async function upstreamChannel(upstream: XdsUpstream): Promise<UpstreamChannel> {
  const address = upstream.address;
  const target = "path" in address
    ? `unix:${address.path}`
    : `${address.host.includes(":") ? `[${address.host}]` : address.host}:${address.port}`;
  const options: grpc.ChannelOptions = {
    // xDS responses can be large (a big LDS or CDS snapshot); Envoy sets no limit either.
    "grpc.max_receive_message_length": -1,
    "grpc.max_send_message_length": -1,
    "grpc.default_authority": upstream.authority,
  };
  if (upstream.googleSsl) {
    const s = upstream.googleSsl;
    const credentials = grpc.credentials.createSsl(
      (await readSource(s.root_certs, "root_certs")) ?? null,
      (await readSource(s.private_key, "private_key")) ?? null,
      (await readSource(s.cert_chain, "cert_chain")) ?? null,
    );
    return { target, credentials, options };
  }
  if (!upstream.tls) return { target, credentials: grpc.credentials.createInsecure(), options };
  const m = await materialOf(upstream.tls);
  if (m.sni) options["grpc.ssl_target_name_override"] = m.sni;
  const credentials = grpc.credentials.createSsl(m.ca ?? null, m.key ?? null, m.cert ?? null, {
    checkServerIdentity: sanCheck(m.validation),
    // No trusted_ca: Envoy does not verify the control plane's certificate; neither does lastcall.
    ...(m.ca ? {} : { rejectUnauthorized: false }),
  });
  return { target, credentials: withoutIpServername(credentials), options };
}

interface SecureConnector {
  connectionOptions?: { servername?: string };
}

/**
 * grpc-js sends the target host as TLS server name even when it is an IP address, which RFC 6066
 * forbids: Node warns, Deno refuses to connect. Envoy sends no SNI unless `sni` is set; so here.
 * (grpc-js 1.14: the connector keeps its `tls.connect` options in `connectionOptions`.)
 */
function withoutIpServername(credentials: grpc.ChannelCredentials): grpc.ChannelCredentials {
  const c = credentials as unknown as {
    _createSecureConnector(...args: unknown[]): SecureConnector;
  };
  const create = c._createSecureConnector.bind(c);
  c._createSecureConnector = (...args: unknown[]) => {
    const connector = create(...args);
    const name = connector.connectionOptions?.servername;
    if (name !== undefined && isIP(name) !== 0) delete connector.connectionOptions!.servername;
    return connector;
  };
  return credentials;
}
