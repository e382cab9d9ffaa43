// Section 2, "Try scaling": the score and d_k sliders, the readout in the
// lesson's form (before → after, and the sentence), and the pipeline
// Dot product → Attention score → Scale (÷ √d_k) → Softmax. The division comes
// from /api/scale; the softmax box shows the first key's weight from the
// story's /api/softmax answer, which these sliders feed (Tom's score and d_k).
import { tr } from "./i18n.js";
import { emit, on, state } from "./state.js";
import { $, $$, api, fixed, h, num, numberOf, pct, report, updater } from "./util.js";

const el = {
  score: $("#score"),
  dk: $("#dk"),
  scoreOut: $("#score-out"),
  dkOut: $("#dk-out"),
  error: $("#s1-error"),
};
let res = null;

const update = updater(async () => {
  const fields = { score: el.score, dk: el.dk };
  try {
    res = await api("scale", { score: numberOf(el.score), dk: numberOf(el.dk) });
    report(el.error, fields);
    render();
  } catch (err) {
    report(el.error, fields, err);
  }
});

function setText(id, text) {
  $(id).textContent = text;
}

export function render() {
  const r = res;
  if (!r) return;
  const exact = r.sqrt_is_integer;
  const sqrtText = num(r.sqrt_dk, 3);
  const scaledText = num(r.scaled, 3);
  // The readout, as the lesson writes it: two decimals.
  setText("#ro-score", fixed(r.score, 2));
  setText("#ro-dk", String(r.dk));
  setText("#ro-sqrt", fixed(r.sqrt_dk, 2));
  setText("#ro-before", fixed(r.score, 2));
  setText("#ro-after", fixed(r.scaled, 2));
  const out = $("#readout");
  out.dataset.value = String(r.scaled);
  out.dataset.dk = String(r.dk);
  out.dataset.score = String(r.score);
  $("#ro-sentence").replaceChildren(
    tr(exact ? "s1.sentence_exact" : "s1.sentence_approx", { score: num(r.score), dk: r.dk, sqrt: sqrtText, scaled: scaledText }),
  );
  $("#eq-caption").replaceChildren(
    tr(exact ? "s1.caption_exact" : "s1.caption_approx", { dk: r.dk, sqrt: sqrtText, scale: num(r.scale, 5) }),
  );
  // The pipeline's boxes.
  setText("#pl-dot", num(r.score));
  setText("#pl-score", num(r.score));
  setText("#pl-sqrt", `√${r.dk} ${exact ? "=" : "≈"} ${sqrtText}`);
  setText("#pl-scaled", `${exact ? "" : "≈ "}${scaledText}`);
  setText("#eq-score", num(r.score));
  setText("#eq-score2", num(r.score));
  setText("#eq-dk", String(r.dk));
  setText("#eq-sqrt", sqrtText);
  setText("#eq-rel2", Number(sqrtText) === r.sqrt_dk && Number(scaledText) === r.scaled ? "=" : "≈");
  const scaled = $("#scaled-value");
  scaled.textContent = scaledText;
  scaled.dataset.value = String(r.scaled);
  scaled.dataset.dk = String(r.dk);
  renderSoftmaxBox();
}

// The softmax box: the story's weights after scaling, when its d_k and first
// score are the sliders' (they are, unless the story's own inputs were edited since).
function renderSoftmaxBox() {
  const box = $("#pl-softmax");
  const story = state.story;
  const linked = story && res && story.dk === res.dk && story.scores[0] === res.score;
  box.classList.toggle("stale", !linked);
  if (!linked) return;
  const p = story.scaled.probs;
  setText("#pl-weight", pct(p[0]));
  box.dataset.p = String(p[0]);
  $("#pl-note").replaceChildren(tr("s1.box_softmax_note", { label: story.labels[0], keys: p.length }));
  $("#pl-bars").replaceChildren(
    ...story.labels.map((label, i) => {
      const fill = h("span", { class: "mini-fill" });
      fill.style.width = `${Math.max(0, Math.min(1, p[i])) * 100}%`;
      return h("div", { class: "mini-bar" }, h("span", { class: "mini-label", text: label }), h("span", { class: "mini-track" }, fill), h("span", { class: "mini-value", text: pct(p[i]) }));
    }),
  );
}

function slid(input, output) {
  output.textContent = input.value;
  update();
  emit("sliders", { score: numberOf(el.score), dk: numberOf(el.dk) });
}

export function init() {
  el.score.addEventListener("input", () => slid(el.score, el.scoreOut));
  el.dk.addEventListener("input", () => slid(el.dk, el.dkOut));
  for (const chip of $$(".presets .chip")) {
    chip.addEventListener("click", () => {
      el.dk.value = chip.dataset.dk;
      el.dk.dispatchEvent(new Event("input"));
    });
  }
  on("story", renderSoftmaxBox);
  // The story's own inputs move the sliders too, so both always agree.
  on("story-inputs", ({ score, dk }) => {
    let moved = false;
    if (score !== null && score >= Number(el.score.min) && score <= Number(el.score.max) && Number(el.score.value) !== score) {
      el.score.value = String(score);
      el.scoreOut.textContent = el.score.value;
      moved = true;
    }
    if (dk !== null && Number.isInteger(dk) && dk >= Number(el.dk.min) && dk <= Number(el.dk.max) && Number(el.dk.value) !== dk) {
      el.dk.value = String(dk);
      el.dkOut.textContent = el.dk.value;
      moved = true;
    }
    if (moved) update();
  });
}

export function setLimits(limits) {
  el.dk.min = String(limits.dk[0]);
  el.dk.max = String(limits.dk[1]);
  el.score.min = "0";
  el.score.max = String(limits.score[1]);
}

export function sliders() {
  return { score: numberOf(el.score), dk: numberOf(el.dk) };
}

export { update };
