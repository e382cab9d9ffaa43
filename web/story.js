// Section 3, Tom · New York · lives: editable scores and their softmax
// weights before and after scaling (/api/softmax). Tom's score and d_k follow
// the sliders of section 2; the misunderstandings follow these scores.
import { joinNames, tr } from "./i18n.js";
import { emit, on, state } from "./state.js";
import { $, api, h, num, numberOf, pct, plain, report, updater } from "./util.js";

const el = {
  rows: $("#story-rows"),
  dk: $("#story-dk"),
  error: $("#s2-error"),
  labels: [],
  scores: [],
  scaledCells: [],
};
let res = null;

export function buildRows(labels, scores) {
  el.rows.replaceChildren();
  el.labels = [];
  el.scores = [];
  el.scaledCells = [];
  labels.forEach((label, i) => {
    const l = h("input", { type: "text", value: label, maxlength: "32", spellcheck: "false", dataset: { i: String(i + 1) } });
    const sc = h("input", { type: "number", value: String(scores[i]), step: "any", dataset: { i: String(i + 1) } });
    const cell = h("td", { class: "scaled-cell" });
    l.addEventListener("input", changed);
    sc.addEventListener("input", changed);
    el.labels.push(l);
    el.scores.push(sc);
    el.scaledCells.push(cell);
    el.rows.append(h("tr", {}, h("td", {}, l), h("td", {}, sc), cell));
  });
  labelInputs();
}

// The inputs' accessible names, in the page's language.
export function labelInputs() {
  el.labels.forEach((x, i) => x.setAttribute("aria-label", plain("s2.aria_key", { i: i + 1 })));
  el.scores.forEach((x, i) => x.setAttribute("aria-label", plain("s2.aria_score", { i: i + 1 })));
}

export function request() {
  return { labels: el.labels.map((x) => x.value), scores: el.scores.map(numberOf), dk: numberOf(el.dk) };
}

export const fields = () => ({ labels: el.labels, scores: el.scores, dk: el.dk });

// A problem the page can name itself, before asking the server (and in the page's language).
export function problem(req) {
  const L = state.info.limits;
  for (let i = 0; i < req.scores.length; i++) {
    const x = req.scores[i];
    if (x === null || x < L.score[0] || x > L.score[1]) {
      return { key: "err.score", vars: { i: i + 1, label: req.labels[i] || `#${i + 1}`, lo: L.score[0], hi: L.score[1] }, field: "scores", index: i };
    }
  }
  if (req.dk === null || !Number.isInteger(req.dk) || req.dk < L.dk[0] || req.dk > L.dk[1]) {
    return { key: "err.dk", vars: { lo: L.dk[0], hi: L.dk[1] }, field: "dk" };
  }
  return null;
}

function markStale(stale) {
  for (const id of ["#bars-raw", "#bars-scaled", "#story-verdict", "#story-summary"]) $(id).classList.toggle("stale", stale);
}

export const update = updater(async () => {
  const req = request();
  const bad = problem(req);
  if (bad) {
    report(el.error, { scores: bad.field === "scores" ? el.scores[bad.index] : [], dk: el.dk }, bad);
    state.story = null;
    markStale(true);
    emit("story", null);
    return;
  }
  try {
    res = await api("softmax", req);
    state.story = res;
    report(el.error, fields());
    markStale(false);
    render();
    emit("story", res);
  } catch (err) {
    report(el.error, fields(), err);
    state.story = null;
    markStale(true);
    emit("story", null);
  }
});

function changed() {
  update();
  const req = request();
  emit("story-inputs", { score: req.scores[0], dk: req.dk });
}

function orderText(labels, ranks) {
  return labels
    .map((label, i) => [ranks[i], i, label])
    .sort((a, b) => a[0] - b[0] || a[1] - b[1])
    .map(([rank, , label], k, all) => (k === 0 ? label : `${all[k - 1][0] === rank ? "=" : ">"} ${label}`))
    .join(" ");
}

function renderBars(host, labels, stats, cls) {
  host.replaceChildren(
    ...labels.map((label, i) => {
      const fill = h("div", { class: "bar-fill" });
      fill.style.width = `${Math.max(0, Math.min(1, stats.probs[i])) * 100}%`;
      return h(
        "div",
        { class: `bar-row ${cls}`, dataset: { p: String(stats.probs[i]), rank: String(stats.ranks[i]) } },
        h("span", { class: "rank", text: `#${stats.ranks[i]}` }),
        h("span", { class: "bar-label", text: label, title: label }),
        h("div", { class: "bar-track" }, fill),
        h("span", { class: "bar-value", text: pct(stats.probs[i]), title: String(stats.probs[i]) }),
      );
    }),
  );
}

// One sentence about one side: a clear winner, a leader, or a tie at the top.
function sideSentence(side, r, stats, extra) {
  const leaders = stats.ranks.map((rank, i) => (rank === 1 ? i : -1)).filter((i) => i >= 0);
  const top = leaders[0];
  const rest = stats.probs.filter((_, i) => !leaders.includes(i)).reduce((a, b) => a + b, 0);
  const vars = { ...extra, top: r.labels[top], tops: joinNames(leaders.map((i) => r.labels[i])), rest: pct(rest) };
  vars[side === "raw" ? "p_raw" : "p_scaled"] = pct(stats.probs[top]);
  let kind = "lead";
  if (leaders.length > 1) kind = "tie";
  else if (stats.probs[top] >= 0.99) kind = "one";
  return { key: `s2.summary_${kind}_${side}`, vars, kind };
}

export function render() {
  const r = res;
  if (!r) return;
  r.scaled_scores.forEach((x, i) => {
    if (el.scaledCells[i]) el.scaledCells[i].textContent = num(x, 3);
  });
  renderBars($("#bars-raw"), r.labels, r.raw, "raw");
  renderBars($("#bars-scaled"), r.labels, r.scaled, "scaled");
  const verdict = $("#story-verdict");
  verdict.classList.toggle("bad", !r.same_order);
  verdict.dataset.same = String(r.same_order);
  verdict.replaceChildren(
    h("span", { text: r.same_order ? "✓" : "✗", "aria-hidden": "true" }),
    r.same_order
      ? h("span", {}, tr("s2.same", { order: orderText(r.labels, r.raw.ranks) }))
      : h("span", {}, tr("s2.differs", { before: orderText(r.labels, r.raw.ranks), after: orderText(r.labels, r.scaled.ranks) })),
  );
  const raw = sideSentence("raw", r, r.raw, {});
  const scaled = sideSentence("scaled", r, r.scaled, {
    dk: r.dk,
    sqrt: num(r.sqrt_dk, 3),
    scaled: joinNumbers(r.scaled_scores.map((x) => num(x, 3))),
  });
  const summary = $("#story-summary");
  summary.dataset.raw = raw.kind;
  summary.dataset.scaled = scaled.kind;
  summary.replaceChildren(tr(raw.key, raw.vars), " ", tr(scaled.key, scaled.vars));
}

// "5, 1.5 and 1" / "5, 1.5, 1" (Korean lists numbers with commas only).
function joinNumbers(xs) {
  return document.documentElement.lang === "ko" || xs.length < 2 ? xs.join(", ") : `${xs.slice(0, -1).join(", ")} and ${xs[xs.length - 1]}`;
}

export function init() {
  el.dk.addEventListener("input", changed);
  // The sliders of section 2 set Tom's score and d_k.
  on("sliders", ({ score, dk }) => {
    if (el.scores[0] && score !== null) el.scores[0].value = String(score);
    if (dk !== null) el.dk.value = String(dk);
    update();
  });
}

export function setLimits(limits, defaults) {
  el.dk.min = String(limits.dk[0]);
  el.dk.max = String(limits.dk[1]);
  el.dk.value = String(defaults.dk);
  buildRows(defaults.labels, defaults.scores);
}
