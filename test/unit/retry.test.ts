import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { pollUntil } from "../../agent/lib/async.ts";
import { retry, RetryError } from "../../agent/lib/retry.ts";

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

/** An operation that fails `failures` times, then answers "ok"; records when it was called. */
function flaky(failures: number) {
  const calls: number[] = [];
  const fn = vi.fn(() => {
    calls.push(Date.now());
    return calls.length > failures
      ? Promise.resolve("ok")
      : Promise.reject(new Error(`try ${calls.length}`));
  });
  return { fn, calls };
}

describe("retry", () => {
  it("answers what the first successful try answers, pausing as delayMs says in between", async () => {
    const { fn, calls } = flaky(3);
    const errors: [string, number][] = [];
    const result = retry(fn, {
      delayMs: (attempt) => 100 * attempt,
      onError: (e, attempt) => errors.push([(e as Error).message, attempt]),
    });
    await vi.runAllTimersAsync();
    await expect(result).resolves.toBe("ok");
    const start = calls[0];
    expect(calls.map((t) => t - start)).toEqual([0, 100, 300, 600]);
    expect(errors).toEqual([["try 1", 1], ["try 2", 2], ["try 3", 3]]);
  });

  it("gives up after maxAttempts with a RetryError whose cause is the last error", async () => {
    const { fn } = flaky(10);
    const result = retry(fn, { maxAttempts: 3, delayMs: 50 }).catch((e) => e);
    await vi.runAllTimersAsync();
    const error = await result;
    expect(error).toBeInstanceOf(RetryError);
    expect(error).toMatchObject({ name: "RetryError", attempts: 3, cause: new Error("try 3") });
    expect(fn).toHaveBeenCalledTimes(3);
  });

  it("rejects with the signal's reason when it aborts during a pause, and tries no more", async () => {
    const { fn } = flaky(10);
    const stop = new AbortController();
    const result = retry(fn, { delayMs: 1000, signal: stop.signal }).catch((e) => e);
    await vi.advanceTimersByTimeAsync(1500);
    stop.abort(new Error("deadline"));
    await vi.runAllTimersAsync();
    expect(await result).toEqual(new Error("deadline"));
    expect(fn).toHaveBeenCalledTimes(2);
  });

  it("does not report a try that the signal cut short", async () => {
    const stop = new AbortController();
    const onError = vi.fn();
    const result = retry((signal) => {
      stop.abort(new Error("stopped"));
      return Promise.reject(signal.reason);
    }, { signal: stop.signal, onError }).catch((e) => e);
    expect(await result).toEqual(new Error("stopped"));
    expect(onError).not.toHaveBeenCalled();
  });

  it("does not call at all once the signal has aborted", async () => {
    const fn = vi.fn(() => Promise.resolve(1));
    await expect(retry(fn, { signal: AbortSignal.abort(new Error("late")) })).rejects.toThrow(
      "late",
    );
    expect(fn).not.toHaveBeenCalled();
  });

  it.each([0, -1, 1.5, Number.NaN])("refuses maxAttempts %d", async (maxAttempts) => {
    await expect(retry(() => Promise.resolve(1), { maxAttempts })).rejects.toThrow(RangeError);
  });
});

describe("pollUntil", () => {
  it("probes every interval until a value comes, reporting only the probes that threw", async () => {
    const answers = [undefined, new Error("refused"), undefined, 42];
    const onError = vi.fn();
    const result = pollUntil(
      () => {
        const next = answers.shift();
        return next instanceof Error ? Promise.reject(next) : Promise.resolve(next);
      },
      25,
      new AbortController().signal,
      onError,
    );
    await vi.runAllTimersAsync();
    await expect(result).resolves.toBe(42);
    expect(onError.mock.calls).toEqual([[new Error("refused")]]);
  });
});
