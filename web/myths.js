// Section 6, common misunderstandings, checked live (/api/misconceptions)
// with the story's scores and d_k. While the story's inputs are invalid the
// checks are greyed out, with one note instead of a second error.
import { rich, t, tr } from "./i18n.js";
import { on, state } from "./state.js";
import { $, api, fixed, h, num, pct, report, updater } from "./util.js";

const el = { host: $("#myth-list"), error: $("#s5-error"), stale: $("#s5-stale") };
let res = null;
let labels = [];

export const update = updater(async () => {
  const story = state.story;
  el.host.classList.toggle("stale", !story);
  el.stale.hidden = Boolean(story);
  if (!story) return;
  const bigDk = state.info ? state.info.limits.dk[1] : 1024;
  try {
    res = await api("misconceptions", { scores: story.scores, labels: story.labels, dk: story.dk, big_dk: bigDk });
    labels = story.labels;
    report(el.error, {});
    render();
  } catch (err) {
    report(el.error, {}, err);
  }
});

function miniTable(head, rows) {
  return h(
    "div",
    { class: "table-scroll" },
    h(
      "table",
      { class: "mini" },
      h("thead", {}, h("tr", {}, head.map((x) => h("th", { scope: "col" }, x)))),
      h("tbody", {}, rows.map((row) => h("tr", {}, row.map((x) => h("td", {}, x))))),
    ),
  );
}

// One misunderstanding: the claim and its live check, with an optional table beside it.
function myth(id, claimKey, checks, table) {
  const text = h("div", {}, h("p", { class: "claim" }, h("span", { class: "badge", text: t("s5.false") }), h("span", {}, tr(claimKey))), checks);
  return h("article", { class: table ? "myth with-table" : "myth", id }, text, table);
}

export function render() {
  const r = res;
  if (!r) return;
  const o = r.order;
  const rankList = (ranks) => labels.map((l, i) => `${l} ${ranks[i]}`).join(", ");
  const learned = r.learned;
  const rec = learned.recovered.map((x) => (x.scale === null ? "–" : num(x.scale, 4)));
  const big = r.big_dk;
  const f = r.flat;
  const dkHead = (dk, sub) => h("span", {}, rich(t("m3.col_small").replace("{dk}", dk)), sub ? h("small", { text: sub }) : null);
  el.host.replaceChildren(
    myth(
      "myth-order",
      "m1.claim",
      [
        h("p", { class: "check" }, tr("m1.a", { before: rankList(o.ranks_raw), after: rankList(o.ranks_scaled) })),
        h("p", { class: "check" }, tr("m1.b", { trials: o.random_trials, changed: o.random_changed, winner: o.random_winner_changed })),
      ],
      miniTable([tr("s2.key"), tr("m1.col_before"), tr("m1.col_after")], labels.map((l, i) => [l, `#${o.ranks_raw[i]}`, `#${o.ranks_scaled[i]}`])),
    ),
    myth(
      "myth-learned",
      "m2.claim",
      [
        h("p", { class: "check" }, tr("m2.a", { dk: learned.dk, scale: num(learned.scale, 5), r1: rec[0], r2: rec[1] })),
        h("p", { class: "check" }, tr("m2.b", { params: learned.trainable_parameters })),
      ],
      miniTable([rich("d_k"), tr("m2.col_scale")], learned.table.map((row) => [String(row.dk), num(row.scale, 5)])),
    ),
    myth(
      "myth-big",
      "m3.claim",
      [
        h("p", { class: "check" }, tr("m3.a", {
          dk: big.dk,
          max_raw: pct(big.big.raw.max_weight),
          grad_raw: num(big.big.raw.grad_norm, 3),
          grad_scaled: num(big.big.scaled.grad_norm, 3),
        })),
      ],
      miniTable(
        ["", dkHead(big.small.dk), dkHead(big.dk, t("s3.without")), dkHead(big.dk, t("s3.with"))],
        [
          [t("m3.row_max"), big.small.raw.max_weight, big.big.raw.max_weight, big.big.scaled.max_weight],
          [`${t("m3.row_entropy")} ≤ ${num(big.max_entropy, 2)}`, big.small.raw.entropy, big.big.raw.entropy, big.big.scaled.entropy],
          [t("m3.row_grad"), big.small.raw.grad_norm, big.big.raw.grad_norm, big.big.scaled.grad_norm],
        ].map(([label, ...xs]) => [label, ...xs.map((x) => fixed(x, 3))]),
      ),
    ),
    myth(
      "myth-flat",
      "m4.claim",
      [h("p", { class: "check" }, tr("m4.a", { top: labels[f.top] ?? "", p_scaled: pct(f.top_scaled), uniform: pct(f.uniform) }))],
      miniTable(
        [tr("s2.key"), tr("m4.col_raw"), tr("m4.col_scaled"), tr("m4.col_uniform")],
        labels.map((l, i) => [l, pct(f.probs_raw[i]), pct(f.probs_scaled[i]), pct(f.uniform)]),
      ),
    ),
  );
}

export function init() {
  on("story", update);
}
