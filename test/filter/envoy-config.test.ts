// Envoy 1.40 refuses an invalid plugin configuration at startup, with the filter's own line.
import { afterEach, expect, test } from "vitest";
import { httpBootstrap } from "../support/envoy-bootstrap.ts";
import { EnvoyExitedError, startEnvoy, stopAllEnvoys } from "../support/envoy.ts";

afterEach(stopAllEnvoys);

test.each([
  ['{"heartbeat_ms":-1}', '"heartbeat_ms" must be an integer from 0 to 4294967295: -1'],
  ['{"exclude_paths":"/healthz"}', '"exclude_paths" must be an array of strings: "/healthz"'],
  ["not json", "malformed JSON at byte 0: not json"],
  ['{"token":"a b"}', '"token" must be at most 256 visible ASCII characters (0x21 to 0x7e): "a b"'],
])("Envoy refuses to start with plugin configuration %s", async (configuration, message) => {
  const error = await startEnvoy(httpBootstrap({ upstreamPort: 9, configuration }), {
    concurrency: 1,
  })
    .then(() => undefined, (e: unknown) => e);
  expect(error).toBeInstanceOf(EnvoyExitedError);
  const exited = error as EnvoyExitedError;
  expect(exited.exit.code).toBe(1);
  expect(exited.output).toContain(`lastcall: invalid plugin configuration: ${message}`);
});
