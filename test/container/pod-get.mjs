// An httpGet lifecycle hook, as the kubelet runs it, from inside the pod's network namespace
// (`nsenter --net`). Argument: JSON { url }. One JSON line when it is answered:
// { event: "answered", status, t } (epoch ms), or { event: "failed", error, t }.
const { url } = JSON.parse(process.argv[2]);
try {
  const response = await fetch(url);
  await response.text();
  console.log(JSON.stringify({ event: "answered", status: response.status, t: Date.now() }));
} catch (error) {
  console.log(
    JSON.stringify({ event: "failed", error: String(error.cause ?? error), t: Date.now() }),
  );
}
