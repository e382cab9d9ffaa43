// Section 5, a real head: one sentence's queries, keys and values from a
// head of all-MiniLM-L6-v2 (web/minilm-head.json, made by
// scripts/export-minilm-head). The page sends them to /api/head, where
// sdpa::attention computes the head with and without the scaling.
import { plain, tr } from "./i18n.js";
import { $, api, h, num, report, updater } from "./util.js";
import { BLUES, drawHeatmap, ramp } from "./map.js";

const el = { select: $("#real-head"), error: $("#real-error") };
let file = null;
let res = null;

export const update = updater(async () => {
  try {
    if (!file) {
      const got = await fetch("minilm-head.json");
      if (!got.ok) throw new Error(`minilm-head.json: HTTP ${got.status}`);
      file = await got.json();
      el.select.replaceChildren(...file.heads.map((x, i) => h("option", { value: String(i), text: String(x.head) })));
    }
    const head = file.heads[Number(el.select.value) || 0];
    res = await api("head", { tokens: file.tokens, q: head.q, k: head.k, v: head.v });
    report(el.error, {});
    render();
  } catch (err) {
    report(el.error, {}, err);
  }
});

const meanMax = (probs) => probs.reduce((a, row) => a + Math.max(...row), 0) / probs.length;

export function render() {
  if (!file) return;
  $("#real-lead").replaceChildren(tr("s4.real_lead", { layer: file.layer, d: file.d }));
  if (!res) return;
  const r = res;
  $("#cap-real-unscaled").replaceChildren(tr("s4.cap_unscaled"));
  $("#cap-real-scaled").replaceChildren(tr("s4.cap_scaled", { d: r.d, scale: num(r.scaled.scale, 4) }));
  for (const [id, side] of [["#real-unscaled", r.unscaled], ["#real-scaled", r.scaled]]) {
    drawHeatmap($(id), r, {
      value: (i, j) => side.probs[i][j],
      color: (p) => ramp(BLUES, p),
      text: (p) => (num(p, 2) === "0" ? "0" : p.toFixed(2)),
      title: (i, j, p) => plain("s4.cell", { q: r.tokens[i], k: r.tokens[j], s: num(r.scores[i][j], 3), p: num(p, 4) }),
      sums: side.row_sums,
    });
    $(id).dataset.scale = String(side.scale);
    $(id).dataset.entropy = String(side.mean_entropy);
  }
  $("#real-note").replaceChildren(
    tr("s4.real_note", {
      sentence: file.sentence,
      e_raw: num(r.unscaled.mean_entropy, 3),
      e_scaled: num(r.scaled.mean_entropy, 3),
      m_raw: num(meanMax(r.unscaled.probs), 3),
      m_scaled: num(meanMax(r.scaled.probs), 3),
    }),
  );
}

export function init() {
  el.select.addEventListener("change", update);
}
