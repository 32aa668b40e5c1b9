import { defineConfig } from "vitest/config";

// Real-Envoy tests start processes and wait on their events: give them room, but keep one file
// per core at a time so two CPUs are not oversubscribed by Envoy workers.
export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    maxWorkers: 2,
    globalSetup: ["test/support/global-setup.ts"],
    // Logs of passing tests are noise in CI; a failing test keeps its own (and lastcall's).
    silent: "passed-only",
    // Every file writes its temporary files in a folder of its own, removed after it (temp.ts).
    setupFiles: ["test/support/temp-setup.ts", "test/support/on-failure.ts"],
  },
});
