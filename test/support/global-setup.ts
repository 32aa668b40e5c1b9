import { envoyVersion, resolveEnvoy } from "../../build/envoy.mjs";
import { createRunTempRoot } from "./temp.ts";

/**
 * Resolves Envoy once for the whole run and prints the version the tests use; makes the run's
 * temporary root (test/support/temp.ts) and returns the teardown that removes it.
 */
export default function setup(): () => void {
  const binary = resolveEnvoy();
  process.env.ENVOY_BIN = binary;
  console.log(`lastcall tests: envoy ${envoyVersion(binary)} (${binary})`);
  return createRunTempRoot();
}
