import { describe, expect, it } from "vitest";
import { RestartBudget, restartDelay } from "../../agent/supervise/backoff.ts";

describe("restartDelay", () => {
  it("starts at 200 ms and doubles", () => {
    expect([1, 2, 3, 4, 5].map((n) => restartDelay(n))).toEqual([200, 400, 800, 1600, 3200]);
  });

  it("is capped at 10 s by default, even after very many attempts", () => {
    expect(restartDelay(7)).toBe(10_000);
    expect(restartDelay(1000)).toBe(10_000);
  });

  it("takes its first delay and cap from options", () => {
    expect([1, 2, 3].map((n) => restartDelay(n, { initialMs: 50, maxMs: 150 }))).toEqual([
      50,
      100,
      150,
    ]);
  });

  it.each([0, -1, 1.5, Number.NaN])("refuses attempt %s", (attempt) => {
    expect(() => restartDelay(attempt)).toThrow(RangeError);
  });
});

describe("RestartBudget", () => {
  it("numbers the attempts and is spent after `limit` crashes", () => {
    const budget = new RestartBudget(2);
    expect(budget.spend(10)).toBe(1);
    expect(budget.spend(10)).toBe(2);
    expect(budget.spend(10)).toBeUndefined();
    expect(budget.spent).toBe(2);
  });

  it("a budget of 0 allows no restart", () => {
    expect(new RestartBudget(0).spend(0)).toBeUndefined();
  });

  it("is refilled by a new config", () => {
    const budget = new RestartBudget(1);
    budget.spend(0);
    expect(budget.spend(0)).toBeUndefined();
    budget.refill();
    expect(budget.spend(0)).toBe(1);
  });

  it("is refilled by a run at least as long as the stable period", () => {
    const budget = new RestartBudget(2, 1000);
    budget.spend(0);
    budget.spend(0);
    expect(budget.spend(999)).toBeUndefined();
    expect(budget.spend(1000)).toBe(1);
  });
});
