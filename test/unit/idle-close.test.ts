import { createServer } from "node:net";
import { describe, expect, it } from "vitest";
import { deriveBootstrap } from "../../agent/envoy/bootstrap.ts";
import { PRESSURE_MONITOR, REDUCE_TIMEOUTS, stillListening } from "../../agent/envoy/idle-close.ts";
import type { Json } from "../support/json.ts";

const options = {
  adminPort: 0,
  statusAddress: "127.0.0.1",
  statusPort: 15020,
  idlePressureFile: "/run/lc/envoy-g1-epoch0.idle",
};
const names = (list: Json[]) => list.map((x) => x.name);

describe("closing an old epoch's idle connections", () => {
  it("adds an overload manager whose pressure file scales the idle timeout of connections to zero", () => {
    const b = deriveBootstrap({}, options);
    const manager = b.config.overload_manager as Json;
    expect(b.idleClose).toEqual({ file: options.idlePressureFile });
    expect(manager.refresh_interval).toBe("0.1s");
    expect(manager.resource_monitors[0].typed_config.filename).toBe(options.idlePressureFile);
    expect(manager.actions[0]).toMatchObject({
      name: REDUCE_TIMEOUTS,
      triggers: [{ name: PRESSURE_MONITOR }],
      typed_config: {
        timer_scale_factors: [{ timer: "HTTP_DOWNSTREAM_CONNECTION_IDLE", min_timeout: "0s" }],
      },
    });
  });

  it("keeps the config's own overload manager and adds to it", () => {
    const own = {
      refresh_interval: "2s",
      resource_monitors: [{ name: "envoy.resource_monitors.fixed_heap" }],
      actions: [{ name: "envoy.overload_actions.stop_accepting_requests" }],
    };
    const manager = deriveBootstrap({ overload_manager: own }, options).config
      .overload_manager as Json;
    expect(manager.refresh_interval).toBe("2s");
    expect(names(manager.resource_monitors)).toEqual([
      "envoy.resource_monitors.fixed_heap",
      PRESSURE_MONITOR,
    ]);
    expect(names(manager.actions)).toEqual([
      "envoy.overload_actions.stop_accepting_requests",
      REDUCE_TIMEOUTS,
    ]);
  });

  it("says why when the config's overload manager already reduces timeouts, and leaves it as it is", () => {
    const own = { actions: [{ name: REDUCE_TIMEOUTS, triggers: [] }] };
    const b = deriveBootstrap({ overload_manager: own }, options);
    expect(b.idleClose).toEqual({
      unavailable: `the config's overload_manager already has ${REDUCE_TIMEOUTS}`,
    });
    expect(b.config.overload_manager).toEqual(own);
  });
});

describe("stillListening", () => {
  it("sees a process's listening socket until it is closed", async () => {
    const server = createServer();
    await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
    const listeningBefore = await stillListening(process.pid);
    await new Promise<void>((done) => server.close(() => done()));
    expect(listeningBefore).toBe(true);
    expect(await stillListening(process.pid)).toBe(false);
  });

  it("cannot tell for a process that is not there", async () => {
    expect(await stillListening(2 ** 22 + 1)).toBeUndefined();
  });
});
