import { envoyVersion, resolveEnvoy } from "../../build/envoy.mjs";

/** Resolves Envoy once for the whole run and prints the version the tests use. */
export default function setup(): void {
  const binary = resolveEnvoy();
  process.env.ENVOY_BIN = binary;
  console.log(`lastcall tests: envoy ${envoyVersion(binary)} (${binary})`);
}
