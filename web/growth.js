// Section 4, why the scores grow with d_k: one experiment at the slider's d_k
// (/api/growth) and the same statistics against d_k (/api/curve). Charts are
// drawn at their box's width, so their text keeps its size on a phone.
import { plain, t, tr } from "./i18n.js";
import { $, api, fixed, h, niceTicks, num, numberOf, onResize, report, s, updater, widthOf } from "./util.js";

const TEXT = "#4b535d"; // chart text: 7.6:1 on white
const RAW = "#c2410c";
const SCALED = "#1c6bb8";

const el = { dk: $("#g-dk"), dkOut: $("#g-dk-out"), seed: $("#g-seed"), error: $("#s3-error") };
let res = null;
let curve = null;
let curveSeed = null;

export const update = updater(async () => {
  const fields = { dk: el.dk, seed: el.seed };
  try {
    const seed = numberOf(el.seed) ?? el.seed.value;
    const [r, c] = await Promise.all([
      api("growth", { dk: numberOf(el.dk), seed }),
      curve && curveSeed === seed ? Promise.resolve(curve) : api("curve", { seed }),
    ]);
    res = r;
    curve = c;
    curveSeed = seed;
    report(el.error, fields);
    render();
  } catch (err) {
    report(el.error, fields, err);
  }
});

export function render() {
  const r = res;
  if (!r) return;
  $("#g-setup").replaceChildren(tr("s3.setup", { trials: r.trials, keys: r.keys, samples: r.histogram.samples }));
  const cols = [
    [tr("s3.row_std", { sqrt: num(r.sqrt_dk, 2) }), (x) => x.std, 2],
    [tr("s3.row_max"), (x) => x.max_weight, 3],
    [tr("s3.row_entropy", { max: num(r.max_entropy, 2) }), (x) => x.entropy, 3],
    [tr("s3.row_grad"), (x) => x.grad_norm, 3],
  ];
  const sides = [
    ["raw", t("s3.without"), { std: r.std_raw, ...r.raw }],
    ["scaled", t("s3.with"), { std: r.std_scaled, ...r.scaled }],
  ];
  $("#g-stats").replaceChildren(
    h("thead", {}, h("tr", {}, h("th"), cols.map(([label]) => h("th", {}, label)))),
    h("tbody", {}, sides.map(([cls, name, x]) => h("tr", { class: cls }, h("td", { text: name }), cols.map(([, f, d]) => h("td", { text: fixed(f(x), d) }))))),
  );
  drawHistogram($("#histogram"), r);
  drawCurves($("#curves"), curve, r);
  if (curve) {
    const peak = curve.raw_grad_peak;
    const note = $("#g-peak");
    note.hidden = !peak;
    note.dataset.dk = String(peak);
    if (peak) note.replaceChildren(tr("s3.peak", { dk: peak }));
  }
}

// Raw scores above the axis, scaled ones below it, on one shared x axis;
// each half is normalised to its own tallest bin.
function drawHistogram(host, r) {
  const W = widthOf(host, 640);
  const H = W < 480 ? 240 : 300, L = 12, R = 12, mid = H / 2, half = H / 2 - 38;
  const hist = r.histogram;
  const x = (v) => L + ((v - hist.lo) / (hist.hi - hist.lo)) * (W - L - R);
  const bw = (W - L - R) / hist.bins;
  const maxRaw = Math.max(1, ...hist.raw);
  const maxScaled = Math.max(1, ...hist.scaled);
  const g = s("g");
  for (const v of niceTicks(hist.lo, hist.hi, W < 480 ? 4 : 8)) {
    g.append(
      s("line", { x1: x(v), x2: x(v), y1: 26, y2: H - 26, stroke: "#eef0f3" }),
      s("text", { x: x(v), y: H - 8, "text-anchor": "middle", "font-size": 12, fill: TEXT }, num(v, 1)),
    );
  }
  hist.raw.forEach((c, i) => {
    const hgt = (c / maxRaw) * half;
    g.append(s("rect", { x: L + i * bw + 0.5, y: mid - hgt, width: Math.max(bw - 1, 0.5), height: hgt, fill: RAW, "fill-opacity": 0.85 }));
  });
  hist.scaled.forEach((c, i) => {
    const hgt = (c / maxScaled) * half;
    g.append(s("rect", { x: L + i * bw + 0.5, y: mid, width: Math.max(bw - 1, 0.5), height: hgt, fill: SCALED, "fill-opacity": 0.85 }));
  });
  for (const sd of [-r.std_raw, r.std_raw]) {
    g.append(s("line", { x1: x(sd), x2: x(sd), y1: mid - half - 6, y2: mid, stroke: "#9c3309", "stroke-dasharray": "4 3" }));
  }
  for (const sd of [-r.std_scaled, r.std_scaled]) {
    g.append(s("line", { x1: x(sd), x2: x(sd), y1: mid, y2: mid + half + 6, stroke: "#124a80", "stroke-dasharray": "4 3" }));
  }
  g.append(s("line", { x1: L, x2: W - R, y1: mid, y2: mid, stroke: "#9aa1a9" }));
  const label = (y, color, key, std) => s("text", { x: L + 4, y, "font-size": 13, fill: color, "font-weight": 600 }, plain(key, { std: num(std, 2) }));
  g.append(label(18, "#9c3309", "s3.hist_raw", r.std_raw), label(H - 30, "#124a80", "s3.hist_scaled", r.std_scaled));
  host.replaceChildren(s("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", "aria-label": plain("s3.hist") }, g));
}

function drawCurves(host, c, cur) {
  if (!c) return;
  const pts = c.points;
  const uniform = 1 / c.keys;
  const panels = [
    ["s3.c_std", (p) => p.std_raw, (p) => p.std_scaled, null, null, null],
    ["s3.c_max", (p) => p.raw.max_weight, (p) => p.scaled.max_weight, 1, uniform, plain("s3.uniform", { keys: c.keys, w: num(uniform, 3) })],
    ["s3.c_entropy", (p) => p.raw.entropy, (p) => p.scaled.entropy, null, c.max_entropy, `ln ${c.keys} = ${num(c.max_entropy, 2)}`],
    ["s3.c_grad", (p) => p.raw.grad_norm, (p) => p.scaled.grad_norm, null, null, null],
  ];
  // Four panels a row on a wide screen, two on a tablet, one on a phone.
  const total = widthOf(host, 1000);
  const perRow = total >= 900 ? 4 : total >= 480 ? 2 : 1;
  const gap = 18;
  const W = Math.floor((total - gap * (perRow - 1)) / perRow);
  const H = 190, L = 40, R = 14, T = 12, B = 36;
  const lx0 = Math.log2(pts[0].dk), lx1 = Math.max(Math.log2(pts[pts.length - 1].dk), lx0 + 1);
  const X = (dk) => L + ((Math.log2(dk) - lx0) / (lx1 - lx0)) * (W - L - R);
  const everyOther = W < 300;
  host.style.gridTemplateColumns = `repeat(${perRow}, ${W}px)`;
  host.replaceChildren(
    ...panels.map(([key, fRaw, fScaled, fixedTop, ref, refLabel]) => {
      let top = fixedTop;
      if (top === null) top = Math.max(...pts.map(fRaw), ...pts.map(fScaled), fRaw(cur), fScaled(cur), ref ?? 0) * 1.08;
      const ticks = niceTicks(0, top, 4);
      top = Math.max(top, ticks[ticks.length - 1]);
      const Y = (v) => T + (1 - v / top) * (H - T - B);
      const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", "aria-label": plain(key) });
      for (const v of ticks) {
        svg.append(
          s("line", { x1: L, x2: W - R, y1: Y(v), y2: Y(v), stroke: "#eceef1" }),
          s("text", { x: L - 5, y: Y(v) + 4, "text-anchor": "end", "font-size": 11, fill: TEXT }, num(v, 2)),
        );
      }
      for (const p of pts) {
        const lg = Math.round(Math.log2(p.dk));
        if ((everyOther ? lg % 4 === 0 : lg % 2 === 0) || p === pts[pts.length - 1]) {
          svg.append(s("text", { x: X(p.dk), y: H - B + 15, "text-anchor": "middle", "font-size": 11, fill: TEXT }, String(p.dk)));
        }
      }
      svg.append(s("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle", "font-size": 11, fill: TEXT }, plain("s3.axis")));
      if (ref !== null) {
        svg.append(s("line", { x1: L, x2: W - R, y1: Y(ref), y2: Y(ref), stroke: "#6b7480", "stroke-dasharray": "4 4", class: "ref" }));
        const above = Y(ref) - 4 > T + 10;
        svg.append(s("text", { x: W - R, y: above ? Y(ref) - 4 : Y(ref) + 13, "text-anchor": "end", "font-size": 11, fill: TEXT }, refLabel));
      }
      // The slider's d_k.
      svg.append(s("line", { x1: X(cur.dk), x2: X(cur.dk), y1: T, y2: H - B, stroke: "#c3c8ce", "stroke-dasharray": "2 3" }));
      for (const [f, color] of [[fRaw, RAW], [fScaled, SCALED]]) {
        const d = pts.map((p, i) => `${i ? "L" : "M"}${X(p.dk).toFixed(1)},${Y(f(p)).toFixed(1)}`).join(" ");
        svg.append(s("path", { d, fill: "none", stroke: color, "stroke-width": 2.2, "stroke-linejoin": "round" }));
        for (const p of pts) svg.append(s("circle", { cx: X(p.dk), cy: Y(f(p)), r: 2.2, fill: color }));
        svg.append(
          s("circle", { cx: X(cur.dk), cy: Y(f(cur)), r: 5, fill: "#fff", stroke: color, "stroke-width": 2.5 }, s("title", {}, `dₖ = ${cur.dk}: ${num(f(cur), 4)}`)),
        );
      }
      svg.append(s("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: "#9aa1a9" }));
      return h("figure", { class: "curve", dataset: { key } }, h("figcaption", {}, tr(key)), svg);
    }),
  );
}

export function init() {
  el.dk.addEventListener("input", () => {
    el.dkOut.textContent = el.dk.value;
    update();
  });
  el.seed.addEventListener("input", update);
  onResize([$("#histogram"), $("#curves")], render);
}

export function setLimits(limits) {
  el.dk.min = String(limits.dk[0]);
  el.dk.max = String(limits.dk[1]);
}
