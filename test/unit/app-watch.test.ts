// What lastcall knows of the apps beside it: each `lastcall exec` reports under its own id.
import { describe, expect, it } from "vitest";
import { APP_LEASE_MS, APP_RENEW_MS, AppWatch, MAX_APPS } from "../../agent/supervise/app-watch.ts";

const quiet = () => {};

describe("AppWatch", () => {
  it("runs while any reported app runs, and is done when every one has exited", async () => {
    const events: Array<[string, Record<string, unknown> | undefined]> = [];
    const watch = new AppWatch({}, (event, fields) => events.push([event, fields]));
    expect(await watch.running()).toBe(false);
    watch.report({ state: "running", id: "a", pid: 1 });
    watch.report({ state: "running", id: "b", pid: 1 });
    watch.report({ state: "running", id: "a", pid: 1 }); // said twice: once
    watch.report({ state: "exited", id: "a", status: 0 });
    expect(await watch.running()).toBe(true);
    watch.report({ state: "exited", id: "b", status: 143 });
    expect(await watch.running()).toBe(false);
    expect(events.map(([event, fields]) => `${event} ${fields?.running}`)).toEqual([
      "app_running 1",
      "app_running 2",
      "app_exited 1",
      "app_exited 0",
    ]);
  });

  it("takes a report without an id as the one app", async () => {
    const watch = new AppWatch({}, quiet);
    watch.report({ state: "running" });
    expect(await watch.running()).toBe(true);
    watch.report({ state: "exited" });
    expect(await watch.running()).toBe(false);
  });

  it(`refuses a new app beyond ${MAX_APPS}, and still takes news of the ones it has`, async () => {
    const watch = new AppWatch({}, quiet);
    for (let i = 0; i < MAX_APPS; i++) {
      expect(watch.report({ state: "running", id: `app-${i}` })).toBe(true);
    }
    expect(watch.report({ state: "running", id: "one-more" })).toBe(false);
    for (let i = 0; i < MAX_APPS; i++) {
      expect(watch.report({ state: "exited", id: `app-${i}` })).toBe(true);
    }
    expect(await watch.running()).toBe(false);
  });

  it("once lastcall exec has spoken, its word wins over --app-port", async () => {
    // Port 1 on loopback accepts nothing: the port alone would say "not running" too, so
    // the check is that a running report wins while the port is closed.
    const watch = new AppWatch({ port: 1 }, quiet);
    watch.report({ state: "running", id: "a" });
    expect(await watch.running()).toBe(true);
    watch.report({ state: "exited", id: "a" });
    expect(await watch.running()).toBe(false);
  });

  it("tells once the last app has gone, by exit or by its lease's end; a port alone never says so", () => {
    let now = 0;
    const gone: string[] = [];
    const watch = new AppWatch({ port: 1, now: () => now }, quiet);
    watch.onGone((via) => gone.push(via));
    expect(watch.gone()).toBe(false); // nothing heard: not known to be gone
    watch.report({ state: "running", id: "a" });
    watch.report({ state: "running", id: "b" });
    watch.report({ state: "exited", id: "a" });
    expect([watch.gone(), gone]).toEqual([false, []]);
    watch.report({ state: "exited", id: "b" });
    expect([watch.gone(), gone]).toEqual([true, ["lastcall exec"]]);
    watch.report({ state: "running", id: "c" });
    expect(watch.gone()).toBe(false);
    now += APP_LEASE_MS;
    expect(watch.gone()).toBe(true);
    expect(gone).toEqual(["lastcall exec", "lastcall exec (lease expired)"]);
  });

  describe("leases: an app not heard of for a while is taken as gone", () => {
    /** A clock the test moves by hand. */
    const clock = () => {
      let now = 1_000_000;
      return { now: () => now, advance: (ms: number) => (now += ms) };
    };

    it(`keeps an app whose lastcall exec renews every ${APP_RENEW_MS} ms, for as long as it does`, async () => {
      const time = clock();
      const events: string[] = [];
      const watch = new AppWatch({ now: time.now }, (event) => events.push(event));
      watch.report({ state: "running", id: "a", pid: 7 });
      for (let i = 0; i < 20; i++) {
        time.advance(APP_RENEW_MS);
        watch.report({ state: "running", id: "a", pid: 7 });
        expect(await watch.running()).toBe(true);
      }
      expect(events).toEqual(["app_running"]);
    });

    it(`forgets an app silent for ${APP_LEASE_MS} ms (its lastcall exec was killed), saying which and for how long`, async () => {
      const time = clock();
      const events: Array<[string, Record<string, unknown> | undefined]> = [];
      const watch = new AppWatch(
        { now: time.now },
        (event, fields) => events.push([event, fields]),
      );
      watch.report({ state: "running", id: "killed", pid: 41 });
      watch.report({ state: "running", id: "alive", pid: 42 });
      time.advance(APP_LEASE_MS - 1);
      watch.report({ state: "running", id: "alive", pid: 42 });
      expect(await watch.running()).toBe(true);
      expect(events.map(([event]) => event)).not.toContain("app_expired");
      time.advance(1);
      expect(await watch.running()).toBe(true); // "alive" renewed
      expect(events.at(-1)).toEqual(["app_expired", {
        id: "killed",
        pid: 41,
        silent_ms: APP_LEASE_MS,
        via: "lastcall exec",
        running: 1,
      }]);
      time.advance(APP_LEASE_MS + 500);
      expect(await watch.running()).toBe(false);
      expect(events.at(-1)).toEqual(["app_expired", {
        id: "alive",
        pid: 42,
        silent_ms: APP_LEASE_MS + 501,
        via: "lastcall exec",
        running: 0,
      }]);
      // Its late "exited" is taken quietly.
      expect(watch.report({ state: "exited", id: "killed", status: 137 })).toBe(true);
      expect(events.filter(([event]) => event === "app_exited")).toEqual([]);
    });

    it(`frees the slots of expired apps: after ${MAX_APPS} killed ones, a new app is taken`, async () => {
      const time = clock();
      const watch = new AppWatch({ now: time.now }, quiet);
      for (let i = 0; i < MAX_APPS; i++) {
        expect(watch.report({ state: "running", id: `killed-${i}` })).toBe(true);
      }
      expect(watch.report({ state: "running", id: "new" })).toBe(false);
      time.advance(APP_LEASE_MS);
      expect(watch.report({ state: "running", id: "new" })).toBe(true);
      expect(await watch.running()).toBe(true);
    });

    it("ends a drain's wait for a killed app when its lease runs out", async () => {
      const time = clock();
      const watch = new AppWatch({ now: time.now }, quiet);
      watch.report({ state: "running", id: "killed" });
      const waiting = watch.waitGone(AbortSignal.timeout(10_000));
      time.advance(APP_LEASE_MS);
      expect(await waiting).toBe(true);
    });

    it("takes an app back when its lastcall exec speaks again after the lease ran out", async () => {
      const time = clock();
      const events: string[] = [];
      const watch = new AppWatch({ now: time.now, leaseMs: 100 }, (event) => events.push(event));
      watch.report({ state: "running", id: "a" });
      time.advance(100);
      expect(await watch.running()).toBe(false);
      watch.report({ state: "running", id: "a" });
      expect(await watch.running()).toBe(true);
      expect(events).toEqual(["app_running", "app_expired", "app_running"]);
    });
  });
});
