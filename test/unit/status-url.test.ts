// `--status-url` has one parser for `status`, `wait`, `exec` and `drain`: whatever form the value
// takes, it means the server's origin.
import { InvalidArgumentError } from "commander";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { statusUrlArg } from "../../agent/options.ts";

/** http and https URLs with any path, query and fragment. */
const anyUrl = fc.webUrl({
  validSchemes: ["http", "https"],
  withQueryParameters: true,
  withFragments: true,
});
/** What may follow an origin: a path, a query, a fragment, or nothing. */
const tail = fc.oneof(
  fc.constant(""),
  fc.constant("/"),
  fc.constant("/healthz/ready"),
  fc.webPath(),
  fc.tuple(fc.webPath(), fc.webQueryParameters()).map(([path, query]) => `${path}?${query}`),
  fc.webFragments().map((fragment) => `#${fragment}`),
);
const host = fc.oneof(fc.ipV4(), fc.domain());
const port = fc.integer({ min: 1, max: 65535 });

describe("statusUrlArg", () => {
  it("gives an origin: no path, no query, no fragment, no trailing slash", () => {
    fc.assert(fc.property(anyUrl, (value) => {
      const origin = statusUrlArg(value);
      const url = new URL(origin);
      expect(origin).not.toMatch(/\/$/);
      expect([url.pathname, url.search, url.hash]).toEqual(["/", "", ""]);
      expect(["http:", "https:"]).toContain(url.protocol);
    }));
  });

  it("is idempotent", () => {
    fc.assert(fc.property(anyUrl, (value) => {
      const origin = statusUrlArg(value);
      expect(statusUrlArg(origin)).toBe(origin);
    }));
  });

  it("ignores whatever follows the origin: wait's .../healthz/ready and drain's base URL mean the same server", () => {
    fc.assert(fc.property(anyUrl, tail, (value, rest) => {
      const origin = statusUrlArg(value);
      expect(statusUrlArg(`${origin}${rest}`)).toBe(origin);
    }));
  });

  it("reads host:port as http://host:port, and ignores surrounding blanks", () => {
    fc.assert(
      fc.property(
        host,
        port,
        tail,
        fc.constantFrom("", " ", "\t", "\n"),
        (name, number, rest, blank) => {
          const expected = new URL(`http://${name}:${number}`).origin;
          expect(statusUrlArg(`${blank}${name}:${number}${rest}${blank}`)).toBe(expected);
          expect(statusUrlArg(`http://${name}:${number}${rest}`)).toBe(expected);
        },
      ),
    );
  });

  it("keeps the scheme, host and port the value gives", () => {
    fc.assert(
      fc.property(
        fc.constantFrom("http", "https"),
        host,
        port,
        tail,
        (scheme, name, number, rest) => {
          const url = new URL(statusUrlArg(`${scheme}://${name}:${number}${rest}`));
          expect(url.protocol).toBe(`${scheme}:`);
          expect(url.hostname).toBe(new URL(`${scheme}://${name}`).hostname);
          // The scheme's default port is left out of an origin, as URL does.
          expect(url.port).toBe(
            (scheme === "http" && number === 80) || (scheme === "https" && number === 443)
              ? ""
              : String(number),
          );
        },
      ),
    );
  });

  it("where wait asks (/healthz/ready) and drain posts (/drain) stay on that origin", () => {
    fc.assert(fc.property(anyUrl, (value) => {
      const origin = statusUrlArg(value);
      expect(new URL("/healthz/ready", origin).origin).toBe(origin);
      expect(String(new URL("/drain", origin))).toBe(`${origin}/drain`);
    }));
  });

  it("refuses what is not an http(s) URL with a host, with commander's usage error", () => {
    const refused = fc.oneof(
      fc.constantFrom(
        "",
        " ",
        "http://",
        "https://",
        "::nope",
        "ftp://127.0.0.1:15020",
        "file:///tmp/x",
        "unix:/admin/admin.sock",
        "http:// /x",
        "localhost:abc",
        "127.0.0.1:",
        "127.0.0.1:15020x",
      ),
      fc.tuple(fc.constantFrom("ftp", "file", "ws", "gopher", "mailto"), host, port).map((
        [scheme, name, number],
      ) => `${scheme}://${name}:${number}/`),
    );
    fc.assert(fc.property(refused, (value) => {
      expect(() => statusUrlArg(value)).toThrow(InvalidArgumentError);
      expect(() => statusUrlArg(value)).toThrow(
        "Expected the status server's http URL, such as http://127.0.0.1:15020.",
      );
    }));
  });
});
