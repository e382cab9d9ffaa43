// sdpa explorer: the page's entry point. Every number shown comes from the
// JSON API (/api/...); these modules only ask, format and draw (plain DOM and
// inline SVG, no libraries):
//   i18n.js + strings.en.js, strings.ko.js   the two languages
//   util.js                                   formatting, DOM, the API client
//   scaling.js  story.js  growth.js  map.js  head.js  myths.js   one section (or part) each
import { currentLang, plain, rich, setLang, t, tr } from "./i18n.js";
import { state } from "./state.js";
import * as growth from "./growth.js";
import * as head from "./head.js";
import * as map from "./map.js";
import * as myths from "./myths.js";
import * as scaling from "./scaling.js";
import * as story from "./story.js";
import { $, $$, api, h, report } from "./util.js";

function applyLang(next) {
  const lang = setLang(next);
  document.documentElement.lang = lang;
  document.title = plain("doc.title");
  for (const el of $$("[data-i18n]")) el.replaceChildren(tr(el.dataset.i18n));
  for (const el of $$("[data-i18n-aria]")) el.setAttribute("aria-label", plain(el.dataset.i18nAria));
  for (const b of $$(".lang button")) b.setAttribute("aria-pressed", String(b.dataset.lang === lang));
  $("#glossary-table tbody").replaceChildren(
    ...t("glossary").map(([en, ko, meaning]) =>
      h("tr", {}, h("td", {}, rich(en)), h("td", {}, rich(ko)), h("td", {}, rich(meaning))),
    ),
  );
  if (state.info) $("#footer-text").replaceChildren(tr("footer", { isa: state.info.isa }));
  story.labelInputs();
  scaling.render();
  story.render();
  growth.render();
  map.render();
  head.render();
  myths.render();
  try {
    localStorage.setItem("sdpa-explorer-lang", lang);
  } catch (e) {
    /* storage may be unavailable */
  }
}

function initialLang() {
  const param = new URLSearchParams(location.search).get("lang");
  if (param) return param;
  try {
    const saved = localStorage.getItem("sdpa-explorer-lang");
    if (saved) return saved;
  } catch (e) {
    /* ignore */
  }
  return (navigator.language || "en").toLowerCase().startsWith("ko") ? "ko" : "en";
}

// The section menu of narrow screens closes once a section is chosen.
function initMenu() {
  const menu = $("#menu");
  for (const a of $$("#menu a")) a.addEventListener("click", () => (menu.open = false));
}

async function start() {
  for (const b of $$(".lang button")) b.addEventListener("click", () => applyLang(b.dataset.lang));
  initMenu();
  scaling.init();
  story.init();
  growth.init();
  map.init();
  head.init();
  myths.init();
  applyLang(initialLang());
  try {
    state.info = await api("info");
    const L = state.info.limits;
    scaling.setLimits(L);
    story.setLimits(L, state.info.defaults);
    growth.setLimits(L);
    map.setLimits(L);
    $("#footer-text").replaceChildren(tr("footer", { isa: state.info.isa }));
  } catch (err) {
    report($("#s1-error"), {}, err);
    return;
  }
  // The story's answer starts the misunderstandings' request; wait for it too.
  await Promise.all([scaling.update(), story.update(), growth.update(), map.update(), head.update()]);
  await myths.update.settled();
  document.body.dataset.ready = "1";
  document.body.dataset.lang = currentLang();
}

start();
