// Formatting and charts for bench/report.mjs: numbers as the page prints them, and horizontal
// bar charts drawn as plain SVG (no dependency).

// ---------- formatting ----------
export const fmt = (
  value,
  digits = 0,
) => (value === null || value === undefined || Number.isNaN(value)
  ? "–"
  : Number(value).toLocaleString("en-US", {
    maximumFractionDigits: digits,
    minimumFractionDigits: digits,
  }));
export const ms = (
  value,
) => (value >= 10_000 ? `${fmt(value / 1000, 1)} s` : `${fmt(value, value < 100 ? 1 : 0)} ms`);
export const spread = (
  s,
  f = (v) => fmt(v),
) => (s.n > 1 ? `${f(s.median)} (${f(s.min)}–${f(s.max)})` : f(s.median));
export const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
export const escape = (text) =>
  String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

// ---------- SVG: horizontal bars with min–max whiskers ----------
export const COLORS = {
  lastcall: "#1f7a4d",
  istio: "#3b6fb6",
  contour: "#b65f3b",
  other: "#777777",
};
export const colorOf = (
  id,
) => (id.startsWith("lastcall")
  ? COLORS.lastcall
  : id.startsWith("istio")
  ? COLORS.istio
  : id.startsWith("contour")
  ? COLORS.contour
  : COLORS.other);

/**
 * groups: [{ title, rows: [{ label, value, min, max, color, note }] }]; options: { title, unit, goals: [{ value, label }], max }
 */
export function barChart(groups, options) {
  const labelWidth = options.labelWidth ?? 250;
  const plotWidth = options.plotWidth ?? 430;
  const noteWidth = options.noteWidth ?? 170;
  const rowHeight = 20;
  const width = labelWidth + plotWidth + noteWidth + 20;
  const values = groups.flatMap((g) => g.rows.flatMap((r) => [r.value, r.max ?? r.value])).filter(
    Number.isFinite,
  );
  const goalValues = (options.goals ?? []).map((g) => g.value);
  const max = options.max ?? niceMax(Math.max(...values, ...goalValues, 0) * 1.05);
  const x = (v) => labelWidth + (Math.max(0, Math.min(v, max)) / max) * plotWidth;
  let y = 40;
  const parts = [];
  for (const group of groups) {
    if (group.title) {
      parts.push(`<text x="10" y="${y + 14}" font-weight="bold">${escape(group.title)}</text>`);
      y += rowHeight + 2;
    }
    for (const row of group.rows) {
      const top = y + 3;
      parts.push(
        `<text x="${labelWidth - 8}" y="${y + 14}" text-anchor="end">${escape(row.label)}</text>`,
      );
      if (Number.isFinite(row.value)) {
        parts.push(
          `<rect x="${labelWidth}" y="${top}" width="${
            Math.max(1, x(row.value) - labelWidth)
          }" height="${rowHeight - 6}" fill="${row.color}" opacity="0.85"/>`,
        );
        if (Number.isFinite(row.min) && Number.isFinite(row.max) && row.max > row.min) {
          const mid = top + (rowHeight - 6) / 2;
          parts.push(
            `<path d="M${x(row.min)},${mid}H${x(row.max)}M${x(row.min)},${top + 2}V${
              top + rowHeight - 8
            }M${x(row.max)},${top + 2}V${
              top + rowHeight - 8
            }" stroke="#111" stroke-width="1.2" fill="none"/>`,
          );
        }
      }
      const over = Number.isFinite(row.value) && row.value > max ? " ▶" : "";
      parts.push(
        `<text x="${labelWidth + plotWidth + 8}" y="${y + 14}">${
          escape((row.note ?? "") + over)
        }</text>`,
      );
      y += rowHeight;
    }
    y += 8;
  }
  const axis = [];
  for (const tick of ticks(max)) {
    axis.push(
      `<path d="M${x(tick)},34V${y - 4}" stroke="#ddd"/>`,
      `<text x="${x(tick)}" y="${y + 10}" text-anchor="middle" fill="#555">${
        fmt(tick, tick === 0 || Number.isInteger(tick) ? 0 : tick < 1 ? 2 : 1)
      }</text>`,
    );
  }
  for (const goal of options.goals ?? []) {
    axis.push(
      `<path d="M${x(goal.value)},30V${y - 4}" stroke="#c00" stroke-dasharray="4 3"/>`,
      `<text x="${x(goal.value) + 3}" y="30" fill="#c00">${escape(goal.label)}</text>`,
    );
  }
  const height = y + 30;
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="Helvetica, Arial, sans-serif" font-size="12">
<rect width="100%" height="100%" fill="#fff"/>
<text x="10" y="18" font-size="14" font-weight="bold">${escape(options.title)}</text>
${axis.join("\n")}
${parts.join("\n")}
<text x="${labelWidth + plotWidth / 2}" y="${height - 6}" text-anchor="middle" fill="#555">${
    escape(options.unit)
  }</text>
</svg>
`;
}

function niceMax(value) {
  if (value <= 0) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) {
    if (value <= step * power) return step * power;
  }
  return 10 * power;
}

function ticks(max) {
  const step = niceMax(max / 5);
  const out = [];
  for (let t = 0; t <= max + 1e-9; t += step) out.push(Math.round(t * 1e6) / 1e6);
  return out;
}
