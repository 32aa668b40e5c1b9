// When a test fails, print the last lines of every lastcall it started: the events that say
// why (a NACK, a refused bind, an exit) are in them, and CI keeps nothing else.
import { beforeEach } from "vitest";
import { startedSince } from "./lastcall.ts";

beforeEach((context) => {
  startedSince();
  context.onTestFailed(() => {
    for (const lc of startedSince()) {
      console.error(
        `--- lastcall pid ${lc.pid} (${lc.configPath}), last output:\n${lc.output().slice(-6000)}`,
      );
    }
  });
});
