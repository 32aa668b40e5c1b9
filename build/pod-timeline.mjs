#!/usr/bin/env node
// Draws the pod test's timeline as docs/pod-timeline.svg (data in docs/pod-timeline.json) and
// prints it as a table. `node build/pod-timeline.mjs [timeline.json]`
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const input = resolve(process.argv[2] ?? join(root, ".cache", "container", "pod-timeline.json"));
const timeline = JSON.parse(readFileSync(input, "utf8"));

const W = 960;
const left = 140;
const right = 40;
const lastMs = Math.max(...timeline.events.map((e) => e.at_ms));
const axisMs = Math.ceil((lastMs + 500) / 1000) * 1000;
const x = (ms) => left + ((W - left - right) * ms) / axisMs;
const s = (ms) => `${(ms / 1000).toFixed(2)} s`;
const esc = (text) =>
  String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

const parts = [];
let y = 64;
const lane = (name, height) => {
  parts.push(`<text x="10" y="${y + height / 2 + 4}" class="lane">${esc(name)}</text>`);
  parts.push(
    `<line x1="${left}" y1="${y + height}" x2="${W - right}" y2="${y + height}" class="sep"/>`,
  );
  const top = y;
  y += height;
  return top;
};

/** Marks events on a lane; events closer than a few pixels share one label. */
function markers(top, height, events, cls) {
  const groups = [];
  for (const e of events) {
    const last = groups.at(-1);
    if (last && x(e.at_ms) - x(last.at(-1).at_ms) < 40) last.push(e);
    else groups.push([e]);
  }
  groups.forEach((group, i) => {
    for (const e of group) {
      parts.push(
        `<line x1="${x(e.at_ms)}" y1="${top + 6}" x2="${x(e.at_ms)}" y2="${
          top + height - 6
        }" class="${cls}"/>`,
      );
    }
    const from = group[0].at_ms;
    const to = group.at(-1).at_ms;
    const when = from === to ? s(from) : `${s(from)}–${s(to)}`;
    const anchor = x(from) > W - 260 ? "end" : "start";
    const tx = anchor === "end" ? x(to) - 6 : x(to) + 6;
    group.forEach((e, j) => {
      parts.push(
        `<text x="${tx}" y="${
          top + 16 + j * 13 + (i % 2) * 0
        }" text-anchor="${anchor}" class="label">${esc(e.what)}</text>`,
      );
    });
    parts.push(
      `<text x="${tx}" y="${
        top + 16 + group.length * 13
      }" text-anchor="${anchor}" class="time">${when}</text>`,
    );
  });
}

const byWho = (who) => timeline.events.filter((e) => e.who === who);

/** A bar from `fromMs` to `toMs` labelled after its end, or inside it where the page ends. */
function bar(top, height, fromMs, toMs, cls, text) {
  parts.push(
    `<rect x="${x(fromMs)}" y="${top}" width="${
      x(toMs) - x(fromMs)
    }" height="${height}" class="${cls}"/>`,
  );
  const outside = x(toMs) + 7 * text.length < W - 4;
  parts.push(
    `<text x="${outside ? x(toMs) + 4 : x(toMs) - 4}" y="${top + height - 3}" text-anchor="${
      outside ? "start" : "end"
    }" class="${outside ? "label" : "label inside"}">${esc(text)}</text>`,
  );
}

// podman
{
  const top = lane("podman", 44);
  markers(top, 44, byWho("podman"), "mark podman");
}
// client: one bar per long request, from its start to its response
{
  const rows = timeline.requests.length;
  const top = lane("client", 15 * rows + 10);
  timeline.requests.forEach((r, i) => {
    bar(
      top + 6 + i * 15,
      12,
      Math.max(r.started_ms, 0),
      r.ended_ms,
      "request",
      `GET /slow?ms=${r.ms} → ${r.status} at ${s(r.ended_ms)}`,
    );
  });
}
// lastcall's events, with its --min-drain floor shaded
{
  const events = byWho("lastcall");
  const top = lane("lastcall", 20 + 13 * Math.max(4, ...[events.length]));
  const drainStart = events.find((e) => e.what === "drain_start")?.at_ms ?? 0;
  parts.push(
    `<rect x="${x(drainStart)}" y="${top + 2}" width="${
      x(drainStart + timeline.min_drain_ms) - x(drainStart)
    }" height="${y - top - 4}" class="floor"/>`,
  );
  parts.push(
    `<text x="${x(drainStart + timeline.min_drain_ms) - 4}" y="${
      y - 8
    }" text-anchor="end" class="time">--min-drain ${timeline.min_drain_ms / 1000} s</text>`,
  );
  markers(top, y - top, events, "mark lastcall");
}
// containers: alive from the stop until their exit
for (const who of ["app", "sidecar"]) {
  const top = lane(`${who} container`, 30);
  const exit = byWho(who).at(-1);
  bar(top + 8, 14, 0, exit.at_ms, `alive ${who}`, `${exit.what} at ${s(exit.at_ms)}`);
}

// time axis
const axisY = y + 6;
const grid = [];
for (let ms = 0; ms <= axisMs; ms += 1000) {
  grid.push(`<line x1="${x(ms)}" y1="60" x2="${x(ms)}" y2="${axisY}" class="grid"/>`);
  grid.push(
    `<text x="${x(ms)}" y="${axisY + 14}" text-anchor="middle" class="time">${ms / 1000} s</text>`,
  );
}
const H = axisY + 40;
const sidecarExit = byWho("sidecar").at(-1).at_ms;
const title =
  `Pod stop with ${timeline.requests.length} requests in flight: every answer delivered, sidecar gone at ${
    s(sidecarExit)
  } of a ${timeline.grace_ms / 1000} s grace period`;
const svg =
  `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif">
<style>
  .lane { font-size: 12px; font-weight: bold; fill: #222 }
  .label { font-size: 11px; fill: #222 }
  .time { font-size: 10px; fill: #666 }
  .inside { fill: #fff }
  .title { font-size: 14px; font-weight: bold; fill: #111 }
  .sub { font-size: 11px; fill: #555 }
  .sep { stroke: #ddd }
  .grid { stroke: #eee }
  .mark { stroke-width: 2 }
  .podman { stroke: #7a4fc4 }
  .lastcall { stroke: #d0582a }
  .request { fill: #4a90d9 }
  .floor { fill: #f6e3c8; opacity: 0.6 }
  .alive { opacity: 0.8 }
  .app { fill: #7fb77e }
  .sidecar { fill: #d0582a }
</style>
<rect width="${W}" height="${H}" fill="#fff"/>
<text x="10" y="20" class="title">${esc(title)}</text>
<text x="10" y="36" class="sub">${
    esc(
      `Recorded ${timeline.recorded} by test/container/pod.test.ts (${timeline.runtime}, ${timeline.pod}). Times from podman pod stop -t ${
        timeline.grace_ms / 1000
      }:`,
    )
  }</text>
<text x="10" y="50" class="sub">SIGTERM to both containers at once, SIGKILL at ${
    timeline.grace_ms / 1000
  } s. The bars of the containers run from the stop to their exit.</text>
${grid.join("\n")}
${parts.join("\n")}
</svg>
`;
writeFileSync(join(root, "docs", "pod-timeline.svg"), svg);
if (input !== join(root, "docs", "pod-timeline.json")) {
  writeFileSync(join(root, "docs", "pod-timeline.json"), `${JSON.stringify(timeline, null, 2)}\n`);
}

console.log("| at | who | what |\n|---:|---|---|");
for (const e of timeline.events) console.log(`| ${s(e.at_ms)} | ${e.who} | ${e.what} |`);
