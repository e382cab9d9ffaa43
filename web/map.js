// Section 5, a real attention map: sdpa::attention (through /api/attention)
// computes the weights with its default scale 1/√d and with scale 1; the raw
// scores QKᵀ and QKᵀ/√d are shown as heatmaps too. Pointing at or focusing a
// cell marks the same query and key in all four maps.
import { plain, tr } from "./i18n.js";
import { state } from "./state.js";
import { $, $$, api, fixed, h, num, numberOf, report, updater } from "./util.js";

const el = {
  tokens: $("#tokens"),
  causal: $("#causal"),
  d: $("#map-d"),
  dOut: $("#map-d-out"),
  dv: $("#map-dv"),
  seed: $("#map-seed"),
  q: $("#m-q"),
  k: $("#m-k"),
  v: $("#m-v"),
  error: $("#s4-error"),
};
let res = null;
let lastRandom = null;

const source = () => $("input[name=source]:checked").value;

function parseMatrix(text) {
  return text
    .split("\n")
    .map((line) => line.trim())
    .filter((line) => line.length > 0)
    .map((line) =>
      line.split(/[\s,;]+/).filter((x) => x.length > 0).map((tok) => {
        const x = Number(tok);
        return Number.isFinite(x) ? x : tok;
      }),
    );
}

function request() {
  const req = {
    tokens: el.tokens.value.split(",").map((x) => x.trim()).filter((x) => x.length > 0),
    causal: el.causal.checked,
  };
  if (source() === "random") {
    req.d = numberOf(el.d) ?? el.d.value;
    req.dv = numberOf(el.dv) ?? el.dv.value;
    req.seed = numberOf(el.seed) ?? el.seed.value;
  } else {
    req.q = parseMatrix(el.q.value);
    req.k = parseMatrix(el.k.value);
    req.v = parseMatrix(el.v.value);
  }
  return req;
}

const fields = () => ({ tokens: el.tokens, d: el.d, dv: el.dv, seed: el.seed, q: el.q, k: el.k, v: el.v, causal: el.causal });

function markStale(stale) {
  for (const x of $$("#map .heatmap, #outputs")) x.classList.toggle("stale", stale);
}

export const update = updater(async () => {
  const req = request();
  const max = state.info ? state.info.limits.tokens : 16;
  if (req.tokens.length < 1 || req.tokens.length > max) {
    report(el.error, fields(), { key: "err.tokens", vars: { max, n: req.tokens.length }, field: "tokens" });
    markStale(true);
    return;
  }
  try {
    res = await api("attention", req);
    if (!res.entered) lastRandom = res;
    report(el.error, fields());
    markStale(false);
    render();
  } catch (err) {
    report(el.error, fields(), err);
    markStale(true);
  }
});

function matrixText(rows) {
  return rows.map((row) => row.map((x) => num(x, 2)).join(" ")).join("\n");
}

function fillFromRandom() {
  if (!lastRandom) return;
  el.q.value = matrixText(lastRandom.q);
  el.k.value = matrixText(lastRandom.k);
  el.v.value = matrixText(lastRandom.v);
}

// Light blue to dark blue, by probability.
export const BLUES = [[247, 251, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]];
export function ramp(stops, x) {
  const y = Math.max(0, Math.min(1, x)) * (stops.length - 1);
  const i = Math.min(Math.floor(y), stops.length - 2);
  const f = y - i;
  const c = stops[i].map((a, k) => Math.round(a + (stops[i + 1][k] - a) * f));
  return { css: `rgb(${c[0]}, ${c[1]}, ${c[2]})`, dark: (0.299 * c[0] + 0.587 * c[1] + 0.114 * c[2]) < 140 };
}
// Scores: orange below zero, white at zero, purple above, by |score| / the map's largest |score|.
const NEG = [[255, 255, 255], [253, 208, 162], [230, 85, 13], [127, 39, 4]];
const POS = [[255, 255, 255], [203, 201, 226], [117, 107, 177], [63, 0, 125]];

// One heatmap: `value(i, j)` is shown in cell (i, j), coloured by `color(v)`.
export function drawHeatmap(host, r, { value, color, text, title, sums }) {
  const n = r.n;
  // Many tokens (a real sentence) get narrower cells.
  const cell = n > 8 ? 27 : 34;
  host.classList.toggle("dense", n > 8);
  host.style.gridTemplateColumns = `minmax(44px, max-content) repeat(${n}, minmax(${cell}px, 1fr))${sums ? " 42px" : ""}`;
  const cells = [h("div", { class: "hd corner", text: "q \\ k", "aria-hidden": "true" })];
  for (const tok of r.tokens) cells.push(h("div", { class: "hd col", text: tok, title: tok }));
  if (sums) cells.push(h("div", { class: "hd col", text: "Σ" }));
  for (let i = 0; i < n; i++) {
    cells.push(h("div", { class: "hd rowh", text: r.tokens[i], title: r.tokens[i] }));
    for (let j = 0; j < n; j++) {
      const v = value(i, j);
      const visible = r.visible[i][j];
      const label = title(i, j, v);
      const cell = h("div", {
        class: visible ? "cell" : "cell masked",
        tabindex: "0",
        role: "img",
        "aria-label": label,
        title: label,
        dataset: { row: String(i), col: String(j), p: String(v) },
        text: visible ? text(v) : "·",
      });
      if (visible) {
        const c = color(v);
        cell.style.background = c.css;
        cell.style.color = c.dark ? "#fff" : "#1f2328";
      }
      cells.push(cell);
    }
    if (sums) cells.push(h("div", { class: "sum", dataset: { sum: String(sums[i]) }, text: sums[i].toFixed(3) }));
  }
  host.replaceChildren(...cells);
  host.dataset.n = String(n);
  host.dataset.causal = String(r.causal);
}

// Marks cell (i, j) in every map of the same group (the toy maps, or the
// real head's), or clears the marks.
function mark(i, j, group) {
  for (const c of $$("#map .cell.hl")) c.classList.remove("hl");
  if (i === null) return;
  for (const c of $$(`#map .heatmap[data-group="${group}"] .cell[data-row="${i}"][data-col="${j}"]`)) c.classList.add("hl");
}

export function render() {
  const r = res;
  if (!r) return;
  const sq = Math.sqrt(r.d);
  const absMax = Math.max(1e-12, ...r.scores.flat().map(Math.abs));
  const scoreColor = (v) => ramp(v < 0 ? NEG : POS, Math.abs(v) / absMax);
  const scoreTitle = (scale) => (i, j, v) => plain("s4.score_cell", { q: r.tokens[i], k: r.tokens[j], s: num(v, 3) });
  $("#cap-qk").replaceChildren(tr("s4.cap_qk"));
  $("#cap-qk-scaled").replaceChildren(tr("s4.cap_qk_scaled", { d: r.d }));
  drawHeatmap($("#map-qk"), r, { value: (i, j) => r.scores[i][j], color: scoreColor, text: (v) => num(v, 1), title: scoreTitle(1) });
  drawHeatmap($("#map-qk-scaled"), r, {
    value: (i, j) => r.scores[i][j] / sq,
    color: (v) => scoreColor(v * sq),
    text: (v) => num(v, 2),
    title: scoreTitle(1 / sq),
  });
  $("#cap-unscaled").replaceChildren(tr("s4.cap_unscaled"));
  $("#cap-scaled").replaceChildren(tr("s4.cap_scaled", { d: r.d, scale: num(r.scaled.scale, 4) }));
  for (const [id, side] of [["#map-unscaled", r.unscaled], ["#map-scaled", r.scaled]]) {
    drawHeatmap($(id), r, {
      value: (i, j) => side.probs[i][j],
      color: (p) => ramp(BLUES, p),
      text: (p) => (num(p, 2) === "0" ? "0" : p.toFixed(2)),
      title: (i, j, p) => plain("s4.cell", { q: r.tokens[i], k: r.tokens[j], s: num(r.scores[i][j], 3), p: num(p, 4) }),
      sums: side.row_sums,
    });
    $(id).dataset.scale = String(side.scale);
  }
  $("#map-note").replaceChildren(tr("s4.note", { e_raw: num(r.unscaled.mean_entropy, 3), e_scaled: num(r.scaled.mean_entropy, 3), isa: r.isa }));
  const dv = r.dv;
  const head1 = h(
    "tr",
    {},
    h("th", { class: "tok" }),
    h("th", { class: "scaled", colspan: String(dv) }, tr("s4.out_scaled")),
    h("th", { class: "gap" }),
    h("th", { class: "raw", colspan: String(dv) }, tr("s4.out_raw")),
  );
  const comps = Array.from({ length: dv }, (_, c) => h("th", { text: `[${c}]` }));
  const head2 = h("tr", {}, h("th", { class: "tok" }, tr("s4.out_token")), comps, h("th", { class: "gap" }), comps.map((x) => x.cloneNode(true)));
  const body = r.tokens.map((tok, i) =>
    h(
      "tr",
      {},
      h("td", { class: "tok", text: tok }),
      r.scaled.out[i].map((x) => h("td", { class: "scaled", text: fixed(x, 3) })),
      h("td", { class: "gap" }),
      r.unscaled.out[i].map((x) => h("td", { class: "raw", text: fixed(x, 3) })),
    ),
  );
  $("#outputs").replaceChildren(h("thead", {}, head1, head2), h("tbody", {}, body));
}

export function init() {
  for (const x of [el.tokens, el.dv, el.seed, el.q, el.k, el.v]) x.addEventListener("input", update);
  el.causal.addEventListener("change", update);
  el.d.addEventListener("input", () => {
    el.dOut.textContent = el.d.value;
    update();
  });
  for (const radio of $$("input[name=source]")) {
    radio.addEventListener("change", () => {
      const entered = source() === "entered";
      $("#entered-controls").hidden = !entered;
      $("#random-controls").hidden = entered;
      if (entered && !el.q.value.trim()) fillFromRandom();
      update();
    });
  }
  $("#fill-random").addEventListener("click", () => {
    fillFromRandom();
    update();
  });
  const section = $("#map");
  const at = (e) => {
    const c = e.target.closest && e.target.closest(".cell");
    mark(c ? c.dataset.row : null, c ? c.dataset.col : null, c ? c.closest(".heatmap").dataset.group : null);
  };
  section.addEventListener("pointerover", at);
  section.addEventListener("focusin", at);
  section.addEventListener("pointerleave", () => mark(null));
  section.addEventListener("focusout", (e) => {
    if (!section.contains(e.relatedTarget)) mark(null);
  });
}

export function setLimits(limits) {
  el.d.min = String(limits.d[0]);
  el.d.max = String(limits.d[1]);
  el.dv.max = String(limits.dv[1]);
}
