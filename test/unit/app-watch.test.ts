// What lastcall knows of the apps beside it: each `lastcall exec` reports under its own id.
import { describe, expect, it } from "vitest";
import { AppWatch, MAX_APPS } from "../../agent/app-watch.ts";

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
    expect(events.map(([event, fields]) => `${event} ${fields?.running}`)).toEqual(["app_running 1", "app_running 2", "app_exited 1", "app_exited 0"]);
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
    for (let i = 0; i < MAX_APPS; i++) expect(watch.report({ state: "running", id: `app-${i}` })).toBe(true);
    expect(watch.report({ state: "running", id: "one-more" })).toBe(false);
    for (let i = 0; i < MAX_APPS; i++) expect(watch.report({ state: "exited", id: `app-${i}` })).toBe(true);
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
});
