#!/usr/bin/env python3
"""Browser test of `sdpa serve`: headless Chromium through Selenium.

Starts `sdpa serve --port 0`, loads the page, moves the d_k slider and checks
the scaled score against the API, checks that every heatmap row sums to 1
(also with the causal mask), switches the language and saves a screenshot.
Exits non-zero on any failure and always stops the server it started.

    explorer_test.py --sdpa build/apps/sdpa/sdpa [--chromedriver PATH]
                     [--screenshot explorer.png] [--screenshot-ko explorer-ko.png]

The screenshot paths may also come from SDPA_EXPLORER_SCREENSHOT and
SDPA_EXPLORER_SCREENSHOT_KO.
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

DEADLINE_S = 50  # the whole test, well inside CTest's 60 s


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
    os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
    with open(path, "wb") as f:
        f.write(base64.b64decode(shot["data"]))
    print(f"screenshot: {path} ({width}x{height})")


def run(args):
    started = time.monotonic()
    proc, base = start_server(args.sdpa)
    driver = None
    try:
        print(f"server: {base}")
        driver = make_driver(args.chromedriver, args.width, 1000)
        driver.set_page_load_timeout(15)
        driver.get(base + "?lang=en")
        wait_for(driver, "the page to load its data", lambda d: d.execute_script("return document.body.dataset.ready === '1'"))
        check(driver.execute_script("return document.documentElement.lang") == "en", "page did not start in English")

        # 1. Move the d_k slider with the keyboard and compare with the library.
        slider = driver.find_element(By.ID, "dk")
        score = int(driver.find_element(By.ID, "score").get_attribute("value"))
        slider.send_keys(Keys.HOME)
        slider.send_keys(Keys.ARROW_RIGHT * 99)  # d_k = 100
        dk = int(slider.get_attribute("value"))
        check(dk == 100, f"slider at {dk}, want 100")
        result = driver.find_element(By.ID, "scaled-value")
        wait_for(driver, f"the scaled score for d_k = {dk}", lambda d: result.get_attribute("data-dk") == str(dk))
        want = post(base, "scale", {"score": score, "dk": dk})
        got = float(result.get_attribute("data-value"))
        check(got == want["scaled"], f"page shows {got}, library says {want['scaled']}")
        check(abs(float(result.text) - want["scaled"]) < 5e-4, f"text {result.text!r} vs {want['scaled']}")
        check(want["scaled"] == score / 10, f"library: {score} / sqrt(100) = {want['scaled']}")
        eq = driver.find_element(By.ID, "equation").text
        print(f"slider d_k={dk}: {' '.join(eq.split())}")

        # Now a d_k whose root is not whole: 100 - 3 = 97.
        slider.send_keys(Keys.ARROW_LEFT * 3)
        wait_for(driver, "the scaled score for d_k = 97", lambda d: result.get_attribute("data-dk") == "97")
        want = post(base, "scale", {"score": score, "dk": 97})
        check(float(result.get_attribute("data-value")) == want["scaled"], "d_k = 97: page and library differ")
        check(abs(float(result.text) - want["scaled"]) < 5e-4, f"d_k = 97: text {result.text!r} vs {want['scaled']}")

        # Put the lesson's example back for the screenshot: 40 ÷ √64 = 5.
        driver.execute_script(
            "const s = document.getElementById('dk'); s.value = 64; s.dispatchEvent(new Event('input'));"
        )
        wait_for(driver, "d_k = 64", lambda d: result.get_attribute("data-dk") == "64")
        check(result.text == "5", f"40 ÷ √64 shows {result.text!r}, want 5")

        # 2. The story: same order before and after scaling.
        verdict = driver.find_element(By.ID, "story-verdict")
        check(verdict.get_attribute("data-same") == "true", "story: order changed")

        # 4. Heatmap rows sum to 1, without and with the causal mask.
        wait_for(driver, "the heatmaps", lambda d: d.find_element(By.ID, "map-scaled").get_attribute("data-n"))
        check_heatmaps(driver, causal=False)
        driver.execute_script("document.getElementById('causal').scrollIntoView({block: 'center'})")
        driver.find_element(By.ID, "causal").click()
        wait_for(driver, "the causal heatmaps",
                 lambda d: d.find_element(By.ID, "map-scaled").get_attribute("data-causal") == "true")
        check_heatmaps(driver, causal=True)
        driver.find_element(By.ID, "causal").click()
        wait_for(driver, "the heatmaps again",
                 lambda d: d.find_element(By.ID, "map-scaled").get_attribute("data-causal") == "false")

        # A bad value is refused by the API and shown, naming the field.
        tokens = driver.find_element(By.ID, "tokens")
        tokens.clear()
        tokens.send_keys(",".join(f"t{i}" for i in range(20)))  # more tokens than the API allows
        error = driver.find_element(By.ID, "s4-error")
        wait_for(driver, "the error for too many tokens", lambda d: error.is_displayed())
        check("tokens" in error.text, f"error does not name the field: {error.text!r}")
        check("invalid" in tokens.get_attribute("class"), "the tokens field is not marked")
        tokens.clear()
        tokens.send_keys("Tom, lives, in, New York")
        wait_for(driver, "the error to clear", lambda d: not error.is_displayed())

        # 5. Every misunderstanding has its live check.
        myths = driver.find_elements(By.CSS_SELECTOR, "#myth-list .myth")
        check(len(myths) == 4, f"{len(myths)} misunderstandings shown, want 4")

        driver.execute_script("window.scrollTo(0, 0)")
        if args.screenshot:
            full_page_screenshot(driver, args.screenshot, args.width)

        # Language switch.
        title_en = driver.find_element(By.ID, "title").text
        driver.find_element(By.ID, "lang-ko").click()
        wait_for(driver, "Korean", lambda d: d.execute_script("return document.documentElement.lang") == "ko")
        title_ko = driver.find_element(By.ID, "title").text
        check(re.search("[\uac00-\ud7a3]", title_ko) is not None, f"title not in Korean: {title_ko!r}")
        check(title_ko != title_en, "title did not change")
        check(result.text == "5", "scaled score lost on language switch")
        check_heatmaps(driver, causal=False)
        print(f"title: {title_en!r} -> {title_ko!r}")
        if args.screenshot_ko:
            full_page_screenshot(driver, args.screenshot_ko, args.width)
        driver.find_element(By.ID, "lang-en").click()
        wait_for(driver, "English", lambda d: d.execute_script("return document.documentElement.lang") == "en")

        # No failed request or script error on the way (favicon included).
        logs = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        expected = [e for e in logs if "api/attention" in e.get("message", "") and "400" in e.get("message", "")]
        check(len(logs) == len(expected), f"browser errors: {[e['message'] for e in logs if e not in expected]}")
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
    parser.add_argument("--screenshot", default=os.environ.get("SDPA_EXPLORER_SCREENSHOT"), help="save an English full-page PNG here")
    parser.add_argument("--screenshot-ko", default=os.environ.get("SDPA_EXPLORER_SCREENSHOT_KO"), help="save a Korean full-page PNG here")
    parser.add_argument("--width", type=int, default=1280, help="window width for the screenshots")
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
