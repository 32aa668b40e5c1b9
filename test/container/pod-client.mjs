// The pod test's client, run in the pod's network namespace; one JSON line per event on stdout
// (ready, short, inflight, response, done).
const { listener, status, longMs, shortCount, timeoutMs } = JSON.parse(process.argv[2]);
const deadline = Date.now() + timeoutMs;
const emit = (event, fields = {}) =>
  console.log(JSON.stringify({ event, t: Date.now(), ...fields }));
const pause = (ms) => new Promise((done) => setTimeout(done, ms));

async function until(what, check) {
  for (;;) {
    if (Date.now() > deadline) throw new Error(`Timed out waiting for ${what}`);
    if (await check().catch(() => false)) return;
    await pause(50);
  }
}

await until(
  "lastcall to be ready",
  async () => (await fetch(`${status}/healthz/ready`)).status === 200,
);
emit("ready");

for (let i = 0; i < shortCount; i++) {
  const response = await fetch(`${listener}/`);
  emit("short", { status: response.status, body: (await response.text()).trim() });
}

const long = longMs.map(async (ms, i) => {
  const started = Date.now();
  try {
    const response = await fetch(`${listener}/slow?ms=${ms}`, {
      signal: AbortSignal.timeout(timeoutMs),
    });
    const body = (await response.text()).trim();
    const ok = response.status === 200 && body.endsWith(`after ${ms} ms)`);
    emit("response", { i, ms, started, status: response.status, body, ok });
    return ok;
  } catch (error) {
    emit("response", { i, ms, started, error: String(error.cause ?? error), ok: false });
    return false;
  }
});

await until("every long request to be in flight", async () => {
  const state = await (await fetch(`${status}/v1/state`)).json();
  return state.inflight === longMs.length;
});
emit("inflight", { count: longMs.length });

const results = await Promise.all(long);
emit("done", { failed: results.filter((ok) => !ok).length });
