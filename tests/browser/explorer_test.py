#!/usr/bin/env python3
"""Browser test of `sdpa serve`: headless Chromium through Selenium.

Starts `sdpa serve --port 0` and, in English and in Korean, checks the ten
parts of the lesson on the page, the live readout after moving the sliders
("100을 √256인 16으로 나누면 6.25가 됩니다."), the story's summary when two
keys tie, the error shown when a score is cleared, the heatmaps (rows sum to
1, also with the causal mask; hovering marks the same cell in every map), an
accessible name on every slider, text contrast, the embedded Hangul font, and
at 390 px: no horizontal overflow, a section menu, chart text of at least
11 px. No console errors. Exits non-zero on any failure and always stops the
server it started.

    explorer_test.py --sdpa build/apps/sdpa/sdpa [--chromedriver PATH]
                     [--screenshots DIR]

With --screenshots (or SDPA_EXPLORER_SCREENSHOTS) it saves explorer.png,
explorer-ko.png, explorer-phone.png and explorer-phone-ko.png there (docs/
holds the committed ones).
"""

import argparse
import base64
import json
import math
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

DEADLINE_S = 110  # the whole test, inside CTest's 120 s


class Failure(Exception):
    pass


def check(cond, message):
    if not cond:
        raise Failure(message)


def start_server(sdpa):
    proc = subprocess.Popen(
        [sdpa, "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    end = time.monotonic() + 10
    line = ""
    while time.monotonic() < end:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            line = proc.stdout.readline()
            break
        if proc.poll() is not None:
            break
    match = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
    if not match:
        stop_server(proc)
        raise Failure(f"sdpa serve did not print its URL (got {line!r}, stderr {proc.stderr.read()!r})")
    return proc, f"http://127.0.0.1:{match.group(1)}/"


def stop_server(proc):
    """SIGTERM, then the exit code; `sdpa serve` must exit 0 on SIGTERM."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return None
    return proc.returncode


def post(base, endpoint, body):
    req = urllib.request.Request(
        base + "api/" + endpoint,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as res:
        return json.load(res)


def make_driver(chromedriver, width, height):
    options = webdriver.ChromeOptions()
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        "--lang=en-US",
        f"--window-size={width},{height}",
    ):
        options.add_argument(arg)
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            options.binary_location = path
            break
    service = Service(executable_path=chromedriver) if chromedriver else Service()
    return webdriver.Chrome(service=service, options=options)


def wait_for(driver, what, predicate, timeout=15):
    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.05).until(lambda d: predicate(d))
    except Exception as e:  # selenium's TimeoutException carries no message of its own
        raise Failure(f"timed out waiting for {what}") from e


def heatmap_rows(driver, host_id):
    """Per row of the heatmap: the probabilities shown (data-p) and the Σ cell."""
    return driver.execute_script(
        """
        const host = document.getElementById(arguments[0]);
        const n = Number(host.dataset.n);
        const rows = [];
        for (let i = 0; i < n; i++) {
          const ps = Array.from(host.querySelectorAll(`.cell[data-row="${i}"]`)).map(c => Number(c.dataset.p));
          rows.push(ps);
        }
        return {n, causal: host.dataset.causal, rows,
                sums: Array.from(host.querySelectorAll('.sum')).map(c => Number(c.dataset.sum))};
        """,
        host_id,
    )


def check_heatmaps(driver, causal):
    for host_id in ("map-scaled", "map-unscaled"):
        got = heatmap_rows(driver, host_id)
        check(got["n"] > 0, f"{host_id}: empty heatmap")
        check(got["causal"] == ("true" if causal else "false"), f"{host_id}: causal flag {got['causal']}")
        for i, row in enumerate(got["rows"]):
            check(len(row) == got["n"], f"{host_id} row {i}: {len(row)} cells, want {got['n']}")
            total = math.fsum(row)
            check(abs(total - 1) < 1e-5, f"{host_id} row {i} sums to {total}, want 1")
            check(abs(got["sums"][i] - 1) < 1e-5, f"{host_id} row {i}: Σ cell {got['sums'][i]}")
            if causal:
                masked = row[i + 1:]
                check(all(p == 0 for p in masked), f"{host_id} row {i}: weight on a later token {masked}")


def save_png(path, shot):
    os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
    with open(path, "wb") as f:
        f.write(base64.b64decode(shot["data"]))


def phone_screenshot(driver, path):
    """The top of the page at phone width, 390 x 1600 CSS px."""
    driver.execute_script("document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0)")
    time.sleep(0.3)  # bar transitions
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot",
        {"format": "png", "captureBeyondViewport": True, "clip": {"x": 0, "y": 0, "width": 390, "height": 1600, "scale": 1}},
    )
    save_png(path, shot)
    print(f"screenshot: {path} (390x1600)")


def full_page_screenshot(driver, path, width):
    """The whole page, not just the window (Chrome DevTools' captureBeyondViewport)."""
    driver.set_window_size(width, 1000)
    driver.execute_script("document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0)")
    height = driver.execute_script("return Math.ceil(document.documentElement.scrollHeight)")
    time.sleep(0.3)  # bar transitions
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
        },
    )
    save_png(path, shot)
    print(f"screenshot: {path} ({width}x{height})")


HANGUL = re.compile("[\uac00-\ud7a3]")


def set_viewport(driver, width, height=900):
    """The page's viewport, whatever the window: a phone is 390 CSS px wide."""
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
    )
    wait_for(driver, f"a {width} px viewport", lambda d: d.execute_script("return window.innerWidth") == width)


def text_of(driver, css):
    return driver.execute_script("const e = document.querySelector(arguments[0]); return e ? e.textContent : null", css)


def switch_lang(driver, lang):
    driver.find_element(By.ID, f"lang-{lang}").click()
    wait_for(driver, lang, lambda d: d.execute_script("return document.documentElement.lang") == lang)


def slide_to(driver, input_id, value):
    """Moves a range input with the keyboard (Home, then arrow keys), as a person would."""
    el = driver.find_element(By.ID, input_id)
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", el)
    el.send_keys(Keys.HOME)
    lo = int(el.get_attribute("min"))
    if value > lo:
        el.send_keys(Keys.ARROW_RIGHT * (value - lo))
    got = int(el.get_attribute("value"))
    check(got == value, f"#{input_id} at {got}, want {value}")


def set_input(driver, el, text):
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", el)
    el.send_keys(Keys.CONTROL, "a")
    el.send_keys(Keys.BACKSPACE)
    if text:
        el.send_keys(text)


# Parts 1-10 of the lesson: (part, selector, what the element must contain in en and in ko).
LESSON = [
    (1, "#intro", "longer the vectors", "벡터가 길수록"),
    (2, "#simple .lead", "930", "930"),
    (2, "#students", "Minsu", "민수"),
    (3, "#story-summary", "the scores become 5, 1.5 and 1: Tom still leads with 95.4%", "점수는 5, 1.5, 1이 되고, Tom은 여전히 95.4%로"),
    (4, "#height", "1.8 m", "1.8 m"),
    (5, "#steps", "relevance score", "관련도 점수"),
    (6, "#divide-by", "number of entries", "숫자의 개수"),
    (7, "#pipeline", "Softmax", "소프트맥스"),
    (7, "#scaling .pipeline-sentence", "then feed it to the softmax", "Query와 Key를 비교한 점수를 √dk로 나눈 뒤 Softmax에 넣는다."),
    (8, "#ro-sentence", "Dividing 40 by 8, the square root of 64, gives 5.", "40을 √64인 8로 나누면 5가 됩니다."),
    (9, "#myth-order", "order", "순서"),
    (9, "#myth-learned", "learns", "학습"),
    (10, "#summary-list", "Scaled Dot-Product Attention", "Scaled Dot-Product Attention"),
]


def check_lesson(driver, lang):
    for part, css, en, ko in LESSON:
        text = text_of(driver, css)
        check(text is not None, f"part {part}: {css} missing")
        want = en if lang == "en" else ko
        check(want in " ".join(text.split()), f"part {part} ({lang}): {css} lacks {want!r}: {text[:200]!r}")
        if lang == "ko" and css not in ("#height",):
            check(HANGUL.search(text) is not None or part in (4,), f"part {part}: {css} not in Korean: {text[:120]!r}")
    check(driver.execute_script("return document.querySelectorAll('#steps li').length") == 4, "part 5: not four steps")
    check(driver.execute_script("return document.querySelectorAll('#summary-list li').length") == 7, "part 10: not seven points")
    for i, (of10, of1000) in enumerate([(9, 930), (8, 920), (7, 910)]):
        row = driver.execute_script("return Array.from(document.querySelectorAll('#students tbody tr')[arguments[0]].cells).map(c => c.textContent)", i)
        check(row[1:] == [str(of10), str(of1000), str(i + 1)], f"part 2: row {i} is {row}")
    # Part 3 and 7: the story's weights (95.4% for Tom once scaled) in the bars and the pipeline.
    check(text_of(driver, "#pl-weight") == "95.4%", f"part 7: softmax box shows {text_of(driver, '#pl-weight')!r}")
    check(text_of(driver, "#pl-dot") == "40" and text_of(driver, "#pl-scaled") == "5", "part 7: boxes do not show 40 → 5")
    check(text_of(driver, "#pl-sqrt") == "√64 = 8", f"part 7: scale box {text_of(driver, '#pl-sqrt')!r}")
    # Part 8: the readout in the lesson's form.
    readout = [text_of(driver, f"#ro-{k}") for k in ("score", "dk", "sqrt", "before", "after")]
    check(readout == ["40.00", "64", "8.00", "40.00", "5.00"], f"part 8: readout {readout}")
    check(int(driver.find_element(By.ID, "score").get_attribute("max")) >= 1000, "part 8: the score slider stops below 1000")
    check(len(driver.find_elements(By.CSS_SELECTOR, "#myth-list .myth")) == 4, "part 9: not four misunderstandings")


# The Korean particle after a number or a name, as the page's josa() picks it.
JOSA = [
    ("40", "을", "을"), ("100", "을", "을"), ("2", "을", "를"), ("8", "으로", "로"), ("16", "으로", "으로"),
    ("7", "으로", "로"), ("3", "으로", "으로"), ("10", "으로", "으로"), ("9.849", "으로", "로"), ("5", "이", "가"),
    ("6.25", "이", "가"), ("1", "이", "이"), ("1.5", "이", "가"), ("0", "이", "이"), ("1000", "이", "이"),
    ("Tom", "이", "이"), ("Tom", "은", "은"), ("New York", "이", "이"), ("lives", "은", "는"), ("model", "으로", "로"),
    ("민수", "이", "가"), ("철수", "과", "와"), ("영희", "은", "는"), ("철수네 반", "을", "을"), ("서울", "으로", "로"),
]


def check_josa(driver):
    got = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "import('./i18n.js').then(m => done(arguments[0].map(([w, p]) => m.josa(w, p))), e => done(String(e)));",
        [[w, p] for w, p, _ in JOSA])
    want = [x for _, _, x in JOSA]
    bad = [(w, p, g, x) for (w, p, x), g in zip(JOSA, got)] if isinstance(got, list) else got
    check(got == want, f"josa: (word, particle, got, want) {[b for b in bad if b[2] != b[3]] if isinstance(bad, list) else bad}")


def check_slider_names(driver, lang):
    """Every slider has an accessible name of its own (not its output's number), in the page's language."""
    for el in driver.find_elements(By.CSS_SELECTOR, "input[type=range]"):
        name = (el.accessible_name or "").strip()
        ident = el.get_attribute("id")
        check(name and not re.fullmatch(r"[\d.\s]+", name), f"slider #{ident}: accessible name {name!r}")
        control = driver.execute_script("const l = arguments[0].labels[0]; return l ? l.control === arguments[0] : false", el)
        check(control, f"slider #{ident}: its label does not point at it")
        if lang == "ko":
            check(HANGUL.search(name) is not None, f"slider #{ident}: name {name!r} not in Korean")
    for el in driver.find_elements(By.CSS_SELECTOR, "#story-rows input"):
        name = el.accessible_name or ""
        check(name, "story input without a name")
        if lang == "ko":
            check(HANGUL.search(name) is not None, f"story input named {name!r} in Korean mode")


CONTRAST_JS = """
function rgb(s) { const m = s.match(/[\\d.]+/g).map(Number); return m; }
function lum([r, g, b]) {
  const f = (c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : Math.pow((c + 0.055) / 1.055, 2.4); };
  return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
}
function ratio(a, b) { const x = lum(a), y = lum(b); return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05); }
function bg(el) {
  for (let e = el; e; e = e.parentElement) {
    const c = getComputedStyle(e).backgroundColor;
    const v = rgb(c);
    if (v.length < 4 || v[3] > 0) return v.slice(0, 3);
  }
  return [255, 255, 255];
}
const out = [];
const texts = [document.querySelector('#footer-text'), ...document.querySelectorAll('#curves svg text, #histogram svg text, .small, .lead, figcaption')];
for (const el of texts) {
  if (!el || !el.textContent.trim()) continue;
  const color = el instanceof SVGElement ? rgb(getComputedStyle(el).fill) : rgb(getComputedStyle(el).color);
  const r = ratio(color.slice(0, 3), bg(el instanceof SVGElement ? el.closest('figure') : el));
  if (r < 4.5) out.push([el.tagName, el.textContent.slice(0, 40), r.toFixed(2)]);
}
return out;
"""

PHONE_JS = """
const w = window.innerWidth;
const wide = [];
for (const el of document.querySelectorAll('body *')) {
  const r = el.getBoundingClientRect();
  if (r.width === 0) continue;
  let clipped = false;
  for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
    const o = getComputedStyle(p).overflowX;
    if (o === 'auto' || o === 'scroll' || o === 'hidden') { clipped = true; break; }
  }
  if (!clipped && r.right > w + 0.5) wide.push(`${el.tagName}#${el.id}.${el.className} right=${Math.round(r.right)}`);
}
const small = [];
for (const t of document.querySelectorAll('svg text')) {
  const svg = t.ownerSVGElement;
  const vb = svg.viewBox.baseVal;
  const scale = vb && vb.width ? svg.getBoundingClientRect().width / vb.width : 1;
  const px = parseFloat(getComputedStyle(t).fontSize) * scale;
  if (px < 10.95) small.push(`${t.textContent.slice(0, 20)}: ${px.toFixed(1)}px`);
}
const menu = document.querySelector('#menu');
return {width: w, scroll: document.documentElement.scrollWidth, wide: wide.slice(0, 8), small: small.slice(0, 8),
        menu: menu && getComputedStyle(menu).display !== 'none' && menu.querySelectorAll('a').length,
        toc: getComputedStyle(document.querySelector('.toc')).display};
"""


def check_phone(driver, lang):
    set_viewport(driver, 390)
    wait_for(driver, "the charts redrawn at 390 px",
             lambda d: d.execute_script("const s = document.querySelector('#histogram svg'); return s && s.viewBox.baseVal.width <= 390"))
    got = driver.execute_script(PHONE_JS)
    check(got["scroll"] <= got["width"], f"390 px ({lang}): page is {got['scroll']} px wide; too wide: {got['wide']}")
    check(not got["wide"], f"390 px ({lang}): elements past the edge: {got['wide']}")
    check(not got["small"], f"390 px ({lang}): chart text under 11 px: {got['small']}")
    check(got["menu"] and got["menu"] >= 7 and got["toc"] == "none", f"390 px ({lang}): no section menu ({got})")
    menu = driver.find_element(By.CSS_SELECTOR, "#menu summary")
    driver.execute_script("window.scrollTo(0, 0)")
    menu.click()
    link = driver.find_element(By.CSS_SELECTOR, "#menu nav a[href='#myths']")
    check(link.is_displayed(), "390 px: the menu does not open")
    link.click()
    wait_for(driver, "the menu to take the page to the misunderstandings",
             lambda d: d.execute_script("return Math.abs(document.getElementById('myths').getBoundingClientRect().top) < 120"))
    check(not driver.execute_script("return document.getElementById('menu').open"), "390 px: the menu stays open")


def check_heatmap_hover(driver):
    cell = driver.find_element(By.CSS_SELECTOR, "#map-qk .cell[data-row='1'][data-col='2']")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", cell)
    driver.execute_script("arguments[0].focus()", cell)
    marked = driver.execute_script(
        "return Array.from(document.querySelectorAll('#map .cell.hl')).map(c => c.closest('.heatmap').id + ':' + c.dataset.row + ',' + c.dataset.col)")
    check(sorted(marked) == sorted(f"{m}:1,2" for m in ("map-qk", "map-qk-scaled", "map-unscaled", "map-scaled")),
          f"focusing QKᵀ cell (1, 2) marks {marked}")
    # The scaled score map is the raw one divided by √d.
    d = driver.execute_script("return document.getElementById('map-d').valueAsNumber")
    raw = float(cell.get_attribute("data-p"))
    scaled = float(driver.find_element(By.CSS_SELECTOR, "#map-qk-scaled .cell[data-row='1'][data-col='2']").get_attribute("data-p"))
    check(abs(scaled - raw / math.sqrt(d)) < 1e-9 * max(1, abs(raw)), f"QKᵀ/√d cell {scaled}, QKᵀ {raw}, d {d}")


def check_story_tie_and_clear(driver, base, lang):
    """Tom = 12 ties with New York: the summary says so. A cleared score: one localized message, stale bars."""
    score = driver.find_elements(By.CSS_SELECTOR, "#story-rows input[type=number]")[0]
    summary = driver.find_element(By.ID, "story-summary")
    set_input(driver, score, "12")
    wait_for(driver, "the tie", lambda d: summary.get_attribute("data-raw") == "tie")
    text = " ".join(summary.text.split())
    want = "Tom and New York share the lead" if lang == "en" else "Tom과 New York이 각각"
    check(want in text, f"tie summary ({lang}): {text!r}")
    check("almost nothing" not in text and "거의" not in text, f"tie summary claims one winner: {text!r}")
    api = post(base, "softmax", {"scores": [12, 12, 8], "labels": ["Tom", "New York", "lives"], "dk": 64})
    check(abs(api["raw"]["probs"][0] - api["raw"]["probs"][1]) < 1e-12, "the API does not tie Tom and New York")

    set_input(driver, score, "")
    error = driver.find_element(By.ID, "s2-error")
    wait_for(driver, "the message for a cleared score", lambda d: error.is_displayed())
    message = error.text
    shown = driver.execute_script("return Array.from(document.querySelectorAll('.error')).filter(e => !e.hidden).length")
    check(shown == 1, f"cleared score: {shown} error messages shown, want 1")
    check("expected" not in message and "/api/" not in message, f"cleared score: raw server message {message!r}")
    if lang == "ko":
        check(HANGUL.search(message) is not None and "Tom" in message, f"cleared score: not in Korean: {message!r}")
    else:
        check("Score 1 (Tom)" in message, f"cleared score: message {message!r}")
    check(driver.execute_script("return getComputedStyle(arguments[0]).fontFamily", error).find("mono") < 0, "error in code font")
    for host in ("bars-raw", "bars-scaled", "myth-list", "pl-softmax"):
        wait_for(driver, f"#{host} greyed out after a cleared score",
                 lambda d: "stale" in d.find_element(By.ID, host).get_attribute("class"))
    set_input(driver, score, "40")
    wait_for(driver, "the error to clear", lambda d: not error.is_displayed())
    wait_for(driver, "fresh bars", lambda d: "stale" not in d.find_element(By.ID, "bars-raw").get_attribute("class"))
    wait_for(driver, "fresh misunderstandings", lambda d: "stale" not in d.find_element(By.ID, "myth-list").get_attribute("class"))


def check_live_readout(driver, base, lang):
    """The sliders drive the readout, the pipeline and Tom's row."""
    slide_to(driver, "score", 100)
    slide_to(driver, "dk", 256)
    sentence = driver.find_element(By.ID, "ro-sentence")
    want = "100을 √256인 16으로 나누면 6.25가 됩니다." if lang == "ko" else "Dividing 100 by 16, the square root of 256, gives 6.25."
    wait_for(driver, f"the sentence {want!r}", lambda d: " ".join(sentence.text.split()) == want)
    readout = [text_of(driver, f"#ro-{k}") for k in ("score", "dk", "sqrt", "before", "after")]
    check(readout == ["100.00", "256", "16.00", "100.00", "6.25"], f"readout after the sliders: {readout}")
    api = post(base, "scale", {"score": 100, "dk": 256})
    check(float(driver.find_element(By.ID, "readout").get_attribute("data-value")) == api["scaled"], "readout vs API")
    # Tom's row and the story's d_k follow; the softmax box shows Tom's weight from the API.
    tom = driver.find_elements(By.CSS_SELECTOR, "#story-rows input[type=number]")[0]
    check(tom.get_attribute("value") == "100", f"Tom's score is {tom.get_attribute('value')}")
    check(driver.find_element(By.ID, "story-dk").get_attribute("value") == "256", "story d_k did not follow")
    story = post(base, "softmax", {"scores": [100, 12, 8], "labels": ["Tom", "New York", "lives"], "dk": 256})
    box = driver.find_element(By.ID, "pl-softmax")
    wait_for(driver, "the softmax box", lambda d: box.get_attribute("data-p") == repr(story["scaled"]["probs"][0])
             or abs(float(box.get_attribute("data-p") or "nan") - story["scaled"]["probs"][0]) < 1e-15)
    # A root that is not whole: 97.
    slide_to(driver, "dk", 97)
    want = post(base, "scale", {"score": 100, "dk": 97})
    result = driver.find_element(By.ID, "scaled-value")
    wait_for(driver, "d_k = 97", lambda d: result.get_attribute("data-dk") == "97")
    check(float(result.get_attribute("data-value")) == want["scaled"], "d_k = 97: page and library differ")
    check("≈" in sentence.text, f"d_k = 97: the sentence does not say it is approximate: {sentence.text!r}")
    # Back to the lesson's example: 40 ÷ √64 = 5.
    slide_to(driver, "score", 40)
    slide_to(driver, "dk", 64)
    wait_for(driver, "40 ÷ √64 = 5", lambda d: text_of(d, "#ro-after") == "5.00" and text_of(d, "#pl-weight") == "95.4%")


def run(args):
    started = time.monotonic()
    proc, base = start_server(args.sdpa)
    driver = None
    try:
        print(f"server: {base}")
        driver = make_driver(args.chromedriver, 1280, 1000)
        driver.set_page_load_timeout(15)
        driver.get(base + "?lang=en")
        wait_for(driver, "the page to load its data", lambda d: d.execute_script("return document.body.dataset.ready === '1'"))
        check(driver.execute_script("return document.documentElement.lang") == "en", "page did not start in English")

        for lang in ("en", "ko"):
            if lang == "ko":
                switch_lang(driver, "ko")
                wait_for(driver, "the Korean story", lambda d: HANGUL.search(text_of(d, "#story-summary") or "") is not None)
            check_lesson(driver, lang)
            if lang == "ko":
                check_josa(driver)
            check_slider_names(driver, lang)
            check_live_readout(driver, base, lang)
            check_story_tie_and_clear(driver, base, lang)
            print(f"{lang}: parts 1-10, readout, tie, cleared score: ok")

        # The Hangul comes from the page's own font, whatever the machine has.
        driver.execute_script("return document.fonts.ready.then(() => true)")
        fonts = driver.execute_script(
            "return document.fonts.ready.then(() => ({check: document.fonts.check('16px SdpaHangul', '점수'),"
            " loaded: Array.from(document.fonts).filter(f => f.family.replace(/\"/g, '') === 'SdpaHangul').map(f => f.status)}))")
        check(fonts["check"] and "loaded" in fonts["loaded"], f"the Hangul font did not load: {fonts}")

        # The heatmaps, in Korean: rows sum to 1, without and with the causal mask.
        wait_for(driver, "the heatmaps", lambda d: d.find_element(By.ID, "map-scaled").get_attribute("data-n"))
        check_heatmaps(driver, causal=False)
        check_heatmap_hover(driver)
        causal = driver.find_element(By.ID, "causal")
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", causal)
        causal.click()
        wait_for(driver, "the causal heatmaps", lambda d: d.find_element(By.ID, "map-scaled").get_attribute("data-causal") == "true")
        check_heatmaps(driver, causal=True)
        causal.click()
        wait_for(driver, "the heatmaps again", lambda d: d.find_element(By.ID, "map-scaled").get_attribute("data-causal") == "false")

        # A real head (all-MiniLM-L6-v2) through /api/head: rows sum to 1; without scaling it is sharper.
        wait_for(driver, "the real head", lambda d: d.find_element(By.ID, "real-scaled").get_attribute("data-n"))
        for host_id in ("real-scaled", "real-unscaled"):
            got = heatmap_rows(driver, host_id)
            check(got["n"] >= 4, f"{host_id}: {got['n']} tokens")
            for i, row in enumerate(got["rows"]):
                check(abs(math.fsum(row) - 1) < 1e-5, f"{host_id} row {i} sums to {math.fsum(row)}")
        entropy = {x: float(driver.find_element(By.ID, x).get_attribute("data-entropy")) for x in ("real-scaled", "real-unscaled")}
        check(entropy["real-unscaled"] < entropy["real-scaled"], f"real head entropies {entropy}")
        select = driver.find_element(By.ID, "real-head")
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'}); arguments[0].selectedIndex = 1;"
                              " arguments[0].dispatchEvent(new Event('change'))", select)
        wait_for(driver, "the second head", lambda d: float(d.find_element(By.ID, "real-scaled").get_attribute("data-entropy")) != entropy["real-scaled"])

        # Too many tokens: a message in the page's language, naming the limit.
        tokens = driver.find_element(By.ID, "tokens")
        set_input(driver, tokens, ",".join(f"t{i}" for i in range(20)))
        error = driver.find_element(By.ID, "s4-error")
        wait_for(driver, "the error for too many tokens", lambda d: error.is_displayed())
        check("16" in error.text and HANGUL.search(error.text), f"tokens error: {error.text!r}")
        check("invalid" in tokens.get_attribute("class"), "the tokens field is not marked")
        set_input(driver, tokens, "Tom, lives, in, New York")
        wait_for(driver, "the error to clear", lambda d: not error.is_displayed())

        # The unscaled gradient's peak and the uniform line of the largest weight.
        peak = driver.find_element(By.ID, "g-peak")
        curve = post(base, "curve", {"seed": 1})
        check(peak.is_displayed() and peak.get_attribute("data-dk") == str(curve["raw_grad_peak"]), "no note on the gradient's peak")
        check(driver.execute_script("return document.querySelectorAll('#curves figure[data-key=\"s3.c_max\"] line.ref').length") == 1,
              "no uniform 1/keys line on the largest-weight panel")

        for lang in ("ko", "en"):
            switch_lang(driver, lang)
            low = driver.execute_script(CONTRAST_JS)
            check(not low, f"contrast under 4.5:1 ({lang}): {low}")

        if args.screenshots:
            for lang, name in (("en", "explorer.png"), ("ko", "explorer-ko.png")):
                switch_lang(driver, lang)
                full_page_screenshot(driver, os.path.join(args.screenshots, name), 1280)

        for lang in ("en", "ko"):
            switch_lang(driver, lang)
            check_phone(driver, lang)
            if args.screenshots:
                phone_screenshot(driver, os.path.join(args.screenshots, f"explorer-phone{'' if lang == 'en' else '-ko'}.png"))
            driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        print("390 px: no overflow, a section menu, chart text >= 11 px: ok")

        # No failed request or script error on the way (favicon and font included).
        logs = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        check(not logs, f"browser errors: {[e['message'] for e in logs]}")
    finally:
        if driver is not None:
            driver.quit()
        rc = stop_server(proc)
    check(rc == 0, f"sdpa serve exited with {rc} on SIGTERM, want 0")
    elapsed = time.monotonic() - started
    check(elapsed < DEADLINE_S, f"took {elapsed:.1f} s")
    print(f"ok ({elapsed:.1f} s)")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sdpa", required=True, help="the sdpa binary")
    parser.add_argument("--chromedriver", default=shutil.which("chromedriver"), help="chromedriver binary")
    parser.add_argument("--screenshots", default=os.environ.get("SDPA_EXPLORER_SCREENSHOTS"),
                        help="save the desktop and phone screenshots, English and Korean, in this folder")
    args = parser.parse_args()
    try:
        run(args)
    except Failure as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # selenium or network trouble is a failure too
        print(f"FAIL: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
