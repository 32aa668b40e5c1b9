/**
 * A parsed JSON or YAML document (an Envoy config, a manifest, an event), read by path in tests:
 * its shape is what the assertions check.
 */
// deno-lint-ignore no-explicit-any -- a document of any shape, read by path: the tests check it
export type Json = Record<string, any>;
