// The status routes against a hostile neighbour: reports need the agent's token and fit in
// 16 KiB (other bodies 4 KiB); quit and drain answer loopback callers only. Calls go through app.request(); the
// peer, which only a socket knows, is handed in as @hono/node-server's bindings.
import fc from "fast-check";
import { describe, expect, it, vi } from "vitest";
import {
  createStatusApp,
  REPORT_MAX_BYTES,
  type ReportAnswer,
  type StatusControls,
} from "../../agent/status/routes.ts";
import { isLoopbackAddress } from "../../agent/status/loopback-only.ts";
import { createReportToken, reportTokenMatches } from "../../agent/status/report-token.ts";

const TOKEN = "s3cret-token-0123456789abcdef";

function fakeControls(answer: ReportAnswer = { draining: false }) {
  return {
    readiness: vi.fn(() => Promise.resolve({ ready: true, reason: "running" })),
    state: vi.fn(() =>
      ({
        phase: "running",
        epochs: [],
        restarts: 0,
        hotRestarts: 0,
        reloadsRejected: 0,
        inflight: 0,
        filter: "reporting",
      }) as ReturnType<StatusControls["state"]>
    ),
    metrics: vi.fn(() => Promise.resolve("lastcall_ready 1\n")),
    reportToken: TOKEN,
    report: vi.fn(() => Promise.resolve(answer)),
    quit: vi.fn(),
    drain: vi.fn(),
    // A caller that is not Envoy (test/unit/status-control.test.ts covers the others).
    connectionMaker: vi.fn(() => Promise.resolve(({ kind: "other" }) as const)),
  } satisfies StatusControls;
}

/** The bindings @hono/node-server gives a request that came from `address`. */
const from = (address: string) => ({
  incoming: {
    socket: {
      remoteAddress: address,
      remotePort: 40000,
      localPort: 15020,
      remoteFamily: address.includes(":") ? "IPv6" : "IPv4",
    },
  },
});

const validReport = { instance: "a", epoch: 0, inflight: 0, draining: false, reason: "heartbeat" };

function postReport(
  app: ReturnType<typeof createStatusApp>,
  body: BodyInit,
  headers: Record<string, string> = { "x-lastcall-token": TOKEN },
  init: RequestInit = {},
) {
  return app.request("/v1/inflight", {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body,
    ...init,
  }, from("127.0.0.1"));
}

describe("POST /v1/inflight requires the report token", () => {
  it.each([
    ["no header", {}],
    ["an empty header", { "x-lastcall-token": "" }],
    ["a wrong token of the same length", { "x-lastcall-token": TOKEN.replace(/.$/, "X") }],
    ["a prefix of the token", { "x-lastcall-token": TOKEN.slice(0, -1) }],
    ["the token and more", { "x-lastcall-token": `${TOKEN}0` }],
  ])("refuses %s with 403 and does not take the report", async (_name, headers) => {
    const controls = fakeControls();
    const res = await postReport(createStatusApp(controls), JSON.stringify(validReport), headers);
    expect(res.status).toBe(403);
    expect(await res.json()).toEqual({ error: "report token missing or wrong" });
    expect(controls.report).not.toHaveBeenCalled();
  });

  it("takes a report with the right token", async () => {
    const controls = fakeControls();
    const res = await postReport(createStatusApp(controls), JSON.stringify(validReport));
    expect(res.status).toBe(200);
    expect(controls.report).toHaveBeenCalledWith(validReport);
  });

  it("still refuses a malformed report with 400", async () => {
    const controls = fakeControls();
    const res = await postReport(
      createStatusApp(controls),
      JSON.stringify({ ...validReport, inflight: -1 }),
    );
    expect(res.status).toBe(400);
    expect(controls.report).not.toHaveBeenCalled();
  });

  it("refuses a token shorter than 16 characters at creation, without naming it", () => {
    const error = (() => {
      try {
        createStatusApp({ ...fakeControls(), reportToken: "short-secret" });
      } catch (e) {
        return e as Error;
      }
    })();
    expect(error).toBeInstanceOf(RangeError);
    expect(error!.message).toBe("Report token too short: 12 characters (at least 16)");
  });
});

describe("POST /v1/inflight bodies are capped at 16 KiB (a VM naming its 32 oldest streams)", () => {
  const padded = (size: number) => {
    const json = JSON.stringify(validReport);
    return json.slice(0, -1) + " ".repeat(size - json.length) + "}";
  };

  it("takes a 16384-byte report", async () => {
    const controls = fakeControls();
    const res = await postReport(createStatusApp(controls), padded(REPORT_MAX_BYTES));
    expect(res.status).toBe(200);
    expect(controls.report).toHaveBeenCalledOnce();
  });

  it("refuses a 16385-byte report with 413", async () => {
    const controls = fakeControls();
    const res = await postReport(createStatusApp(controls), padded(REPORT_MAX_BYTES + 1));
    expect(res.status).toBe(413);
    expect(await res.json()).toEqual({ error: "report body larger than 16384 bytes" });
    expect(controls.report).not.toHaveBeenCalled();
  });

  it("refuses a streamed body once it passes 16384 bytes, without reading it all", async () => {
    const controls = fakeControls();
    let pulled = 0;
    const stream = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (++pulled > 64) return controller.close();
        controller.enqueue(new Uint8Array(1024).fill(0x20));
      },
    });
    const res = await postReport(
      createStatusApp(controls),
      stream,
      undefined,
      { duplex: "half" } as RequestInit,
    );
    expect(res.status).toBe(413);
    expect(pulled).toBeLessThan(22);
    expect(controls.report).not.toHaveBeenCalled();
  });

  it("does not read a stranger's body at all", async () => {
    let pulled = 0;
    const stream = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (++pulled > 64) return controller.close();
        controller.enqueue(new Uint8Array(1024));
      },
    }, { highWaterMark: 0 });
    const res = await postReport(
      createStatusApp(fakeControls()),
      stream,
      {},
      { duplex: "half" } as RequestInit,
    );
    expect(res.status).toBe(403);
    expect(pulled).toBe(0);
  });
});

describe("POST /v1/inflight answers in headers and body", () => {
  it("draining with a probe: x-lastcall-draining 1, x-lastcall-probe, and both in the body", async () => {
    const res = await postReport(
      createStatusApp(fakeControls({ draining: true, probe: 7 })),
      JSON.stringify(validReport),
    );
    expect(res.status).toBe(200);
    expect(res.headers.get("x-lastcall-draining")).toBe("1");
    expect(res.headers.get("x-lastcall-probe")).toBe("7");
    expect(await res.json()).toEqual({ draining: true, probe: 7 });
  });

  it("not draining, no probe: x-lastcall-draining 0 and no probe header", async () => {
    const res = await postReport(
      createStatusApp(fakeControls({ draining: false })),
      JSON.stringify(validReport),
    );
    expect(res.headers.get("x-lastcall-draining")).toBe("0");
    expect(res.headers.has("x-lastcall-probe")).toBe(false);
    expect(await res.text()).toBe('{"draining":false}');
  });
});

describe("the token appears in no response", () => {
  it("whatever is asked, with or without it", async () => {
    const app = createStatusApp(fakeControls({ draining: true, probe: 3 }));
    const requests: [string, RequestInit][] = [
      ["/healthz/ready", {}],
      ["/healthz/live", {}],
      ["/v1/state", {}],
      ["/metrics", {}],
      ["/v1/inflight", {
        method: "POST",
        headers: { "x-lastcall-token": TOKEN },
        body: JSON.stringify(validReport),
      }],
      ["/v1/inflight", { method: "POST", headers: { "x-lastcall-token": TOKEN }, body: "{" }],
      ["/v1/inflight", {
        method: "POST",
        headers: { "x-lastcall-token": TOKEN },
        body: "x".repeat(5000),
      }],
      ["/v1/inflight", { method: "POST", headers: { "x-lastcall-token": "wrong" }, body: "{}" }],
      ["/quitquitquit", { method: "POST" }],
      ["/drain", { method: "POST" }],
      ["/nowhere", {}],
    ];
    for (const [path, init] of requests) {
      const res = await app.request(path, init, from("10.1.2.3"));
      const text = `${[...res.headers].join("\n")}\n${await res.text()}`;
      expect(text, path).not.toContain(TOKEN);
    }
  });
});

describe("POST /quitquitquit and POST /drain answer loopback callers only", () => {
  const routes = [["/quitquitquit", "quit"], ["/drain", "drain"]] as const;

  it.each(
    routes.flatMap(([path, call]) =>
      ["127.0.0.1", "127.3.4.5", "::1", "::ffff:127.0.0.1"].map((peer) => ({ path, call, peer }))
    ),
  )(
    "$path from $peer: 200",
    async ({ path, call, peer }) => {
      const controls = fakeControls();
      const res = await createStatusApp(controls).request(path, { method: "POST" }, from(peer));
      expect(res.status).toBe(200);
      expect(controls[call]).toHaveBeenCalledOnce();
    },
  );

  it.each(
    routes.flatMap(([path, call]) =>
      ["10.0.0.7", "192.0.2.2", "::ffff:10.0.0.7", "fd00::2", "128.0.0.1", "::2"].map((peer) => ({
        path,
        call,
        peer,
      }))
    ),
  )(
    "$path from $peer: 403, nothing done",
    async ({ path, call, peer }) => {
      const controls = fakeControls();
      const res = await createStatusApp(controls).request(path, { method: "POST" }, from(peer));
      expect(res.status).toBe(403);
      expect(await res.json()).toEqual({
        error: `POST ${path} is accepted only from loopback, not from ${peer}`,
      });
      expect(controls[call]).not.toHaveBeenCalled();
    },
  );

  it.each(routes)("%s with no socket to tell the peer: 403", async (path, call) => {
    const controls = fakeControls();
    const res = await createStatusApp(controls).request(path, {
      method: "POST",
      headers: { "x-forwarded-for": "127.0.0.1" },
    });
    expect(res.status).toBe(403);
    expect(await res.json()).toEqual({
      error: `POST ${path} is accepted only from loopback, not from an unknown address`,
    });
    expect(controls[call]).not.toHaveBeenCalled();
  });

  it.each(["/healthz/ready", "/healthz/live", "/v1/state", "/metrics"])(
    "%s stays open to anyone",
    async (path) => {
      expect((await createStatusApp(fakeControls()).request(path, {}, from("10.0.0.7"))).status)
        .toBe(200);
      expect((await createStatusApp(fakeControls()).request(path)).status).toBe(200);
    },
  );
});

describe("POST /v1/app: what lastcall exec says of its app", () => {
  const post = (controls: StatusControls, body: unknown, peer = "127.0.0.1") =>
    createStatusApp(controls).request("/v1/app", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    }, from(peer));

  it("takes a report with an id, from loopback", async () => {
    const controls = { ...fakeControls(), app: vi.fn(() => true) };
    const res = await post(controls, { state: "running", id: "4f1c-9a.b_2", pid: 7 });
    expect(res.status).toBe(200);
    expect(controls.app).toHaveBeenCalledWith({
      state: "running",
      id: "4f1c-9a.b_2",
      pid: 7,
      status: undefined,
    });
  });

  it("refuses any other caller with 403", async () => {
    const controls = { ...fakeControls(), app: vi.fn(() => true) };
    expect((await post(controls, { state: "running" }, "10.0.0.7")).status).toBe(403);
    expect(controls.app).not.toHaveBeenCalled();
  });

  it("refuses an id that is not 1 to 64 word characters, naming it", async () => {
    const ids = fc.oneof(
      fc.string().filter((id) => !/^[\w.-]{1,64}$/.test(id)),
      fc.integer(),
      fc.constant(null),
    );
    await fc.assert(
      fc.asyncProperty(ids, async (id) => {
        const controls = { ...fakeControls(), app: vi.fn(() => true) };
        const res = await post(controls, { state: "exited", id });
        expect(res.status).toBe(400);
        expect((await res.json()).error).toMatch(
          /^app id must be 1 to 64 letters, digits, _ \. or -, not /,
        );
        expect(controls.app).not.toHaveBeenCalled();
      }),
      { numRuns: 50 },
    );
  });

  it("answers 429 when the agent refuses one more app", async () => {
    const res = await post({ ...fakeControls(), app: () => false }, {
      state: "running",
      id: "one-too-many",
    });
    expect(res.status).toBe(429);
    expect(await res.json()).toEqual({ error: "too many apps reported" });
  });
});

describe("isLoopbackAddress", () => {
  it("an IPv4 address (also mapped into IPv6) is loopback exactly when it is in 127.0.0.0/8", () => {
    const octet = fc.integer({ min: 0, max: 255 });
    fc.assert(fc.property(octet, octet, octet, octet, fc.boolean(), (a, b, c, d, mapped) => {
      const v4 = `${a}.${b}.${c}.${d}`;
      expect(isLoopbackAddress(mapped ? `::ffff:${v4}` : v4)).toBe(a === 127);
    }));
  });

  it.each([
    ["::1", true],
    ["::FFFF:127.0.0.1", true],
    [undefined, false],
    ["", false],
    ["localhost", false],
    ["127.0.0.1.evil", false],
    ["127.0.0.256", false],
    ["::", false],
    ["fe80::1", false],
  ])("%j: %s", (address, loopback) => {
    expect(isLoopbackAddress(address)).toBe(loopback);
  });
});

describe("reportTokenMatches", () => {
  it("matches exactly the token", () => {
    fc.assert(fc.property(fc.string({ minLength: 1 }), fc.option(fc.string()), (token, given) => {
      const expected = new TextEncoder().encode(token);
      expect(reportTokenMatches(given ?? undefined, expected)).toBe(given === token);
      expect(reportTokenMatches(token, expected)).toBe(true);
    }));
  });

  it("createReportToken makes distinct header-safe tokens long enough for createStatusApp", () => {
    const tokens = new Set(Array.from({ length: 100 }, createReportToken));
    expect(tokens.size).toBe(100);
    for (const token of tokens) expect(token).toMatch(/^[A-Za-z0-9_-]{43}$/);
  });
});
