"""The gallery and the sampling page in headless Chromium (Debian's `chromium`,
driven by Playwright's Python bindings; no browser is downloaded).

Screenshots are written to $ZOO_TEST_ARTIFACTS (or a temporary folder, printed).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the browser tests need the web extra: pip install 'zoo-lm[web]'")
sync_api = pytest.importorskip("playwright.sync_api", reason="the browser tests need Playwright: pip install playwright")

from tests.web_support import SMALL, Server, artifacts_folder, zoo_sample  # noqa: E402

CHROMIUM = os.environ.get("ZOO_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).is_file():
    pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install chromium (or set ZOO_CHROMIUM)", allow_module_level=True)

# Flags for a sandbox-less container without a GPU or network.
LAUNCH_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PATTERN = "*1b-learned*"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def artifacts():
    folder = artifacts_folder()
    print(f"\nbrowser screenshots: {folder}")
    return folder


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    done = subprocess.run([sys.executable, "-m", "zoo_core.cli", "gallery", "--out", str(root / "site"), "--variants",
                           PATTERN, "--cache", str(root / "cache"), "--quiet"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return root / "site"


@pytest.fixture(scope="module")
def browser():
    # Playwright gives every launch a fresh temporary profile of its own.
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_FLAGS)
        yield browser
        browser.close()


class _Watched:
    """A page that records console errors, failed requests and every image's state."""

    def __init__(self, browser):
        self.page = browser.new_page(viewport={"width": 1200, "height": 900})
        self.errors: list[str] = []
        self.page.on("console", lambda message: self.errors.append(message.text) if message.type == "error" else None)
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("requestfailed", lambda request: self.errors.append(f"failed: {request.url}"))

    def broken_images(self) -> list[str]:
        return self.page.evaluate("Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src)")

    def image_count(self) -> int:
        return self.page.evaluate("document.images.length")


def test_gallery_from_disk(browser, site, artifacts):
    watched = _Watched(browser)
    page = watched.page
    page.goto((site / "index.html").as_uri())
    names = page.eval_on_selector_all("#variants tbody tr", "rows => rows.map(r => r.dataset.name)")
    assert names == ["transformer-1b-learned-ctx8", "transformer-1b-learned-post-ctx8"]
    assert page.inner_text("#shown-count") == "2 of 2 shown"
    # Filtering by tag hides the pre-norm variant; sorting by loss puts the lower first.
    page.select_option("#filter-tags", "post-norm")
    assert page.inner_text("#shown-count") == "1 of 2 shown"
    page.select_option("#filter-tags", "")
    page.click("th:has-text('val loss')")
    sorted_names = page.eval_on_selector_all("#variants tbody tr", "rows => rows.map(r => r.dataset.name)")
    assert sorted_names[0] == "transformer-1b-learned-ctx8"  # 3.9599 < 3.9703
    page.screenshot(path=str(artifacts / "gallery-index.png"), full_page=True)

    page.click("text=transformer-1b-learned-ctx8")
    page.wait_for_load_state("load")
    assert page.url.endswith("variants/transformer-1b-learned-ctx8.html")
    assert watched.image_count() == 5  # loss curves, two attention heads, the logit lens, the head ablation
    assert watched.broken_images() == []
    page.screenshot(path=str(artifacts / "gallery-variant.png"), full_page=True)

    page.goto((site / "studies" / "positions.html").as_uri())
    assert watched.image_count() >= 1 and watched.broken_images() == []
    page.screenshot(path=str(artifacts / "gallery-study.png"))
    assert watched.errors == []


def test_the_families_results_table_sorts_by_a_click(browser, site, artifacts):
    """results/families.csv (`zoo experiment families --table results/families.csv`) on the
    index: a click on a heading sorts by its numbers, a second click reverses."""
    import csv

    with (ROOT / "results" / "families.csv").open(newline="") as file:
        rows = list(csv.DictReader(file))
    watched = _Watched(browser)
    page = watched.page
    page.goto((site / "index.html").as_uri())
    shown = "rows => rows.map(r => r.cells[0].textContent)"
    assert page.eval_on_selector_all("#results-families tbody tr", shown) == [row["variant"] for row in rows]
    page.click("#results-families th:text-is('bits_per_byte')")
    by_bits = [row["variant"] for row in sorted(rows, key=lambda row: float(row["bits_per_byte"]))]
    assert page.eval_on_selector_all("#results-families tbody tr", shown) == by_bits
    page.click("#results-families th:text-is('bits_per_byte')")
    assert page.eval_on_selector_all("#results-families tbody tr", shown) == by_bits[::-1]
    page.click("#results-families th:text-is('variant')")
    assert page.eval_on_selector_all("#results-families tbody tr", shown) == sorted(row["variant"] for row in rows)
    page.screenshot(path=str(artifacts / "gallery-results.png"), full_page=True)
    assert watched.errors == []


def test_sampling_page_streams_what_zoo_sample_prints(browser, site, artifacts):
    server = Server("--site", str(site))
    try:
        watched = _Watched(browser)
        page = watched.page
        page.goto(server.url + "/")
        assert page.eval_on_selector_all("#variants tbody tr", "rows => rows.length") == 2  # the gallery, served
        assert watched.broken_images() == []
        page.goto(server.url + "/sample")
        page.select_option("#model", SMALL)
        page.fill("#prompt", "JULIET:")
        page.fill("#temperature", "0.9")
        page.fill("#top_k", "50")
        page.fill("#max_tokens", "40")
        page.fill("#seed", "11")
        page.click("#generate")
        page.wait_for_selector("#status[data-state]", timeout=60_000)
        assert page.get_attribute("#status", "data-state") == "done", page.inner_text("#status")
        shown = page.inner_text("#output")
        page.screenshot(path=str(artifacts / "sampling-page.png"), full_page=True)
        assert shown.rstrip("\n") == zoo_sample(SMALL, "JULIET:", 40, seed=11, temperature=0.9, top_k=50).rstrip("\n")
        assert watched.errors == []
        # A limit the page cannot hide: the server's message is shown, not a stack trace.
        page.evaluate("document.getElementById('max_tokens').removeAttribute('max')")
        page.fill("#max_tokens", "999999")
        page.click("#generate")
        page.wait_for_selector("#status[data-state]", timeout=60_000)
        assert "max_tokens" in page.inner_text("#status")
        assert [e for e in watched.errors if "status of 400" not in e] == []  # the browser logs the refused request
    finally:
        server.stop()


@pytest.mark.slow
def test_whole_zoo_gallery_from_disk(browser, tmp_path, artifacts):
    """Every variant of every catalogue layer, as `zoo gallery --out site/` writes it."""
    import zoo_core

    done = subprocess.run([sys.executable, "-m", "zoo_core.cli", "gallery", "--out", str(tmp_path / "site"),
                           "--cache", str(tmp_path / "cache"), "--quiet"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    watched = _Watched(browser)
    watched.page.goto((tmp_path / "site" / "index.html").as_uri())
    shown = watched.page.eval_on_selector_all("#variants tbody tr", "rows => rows.map(r => r.dataset.name)")
    assert sorted(shown) == sorted(card.name for card in zoo_core.list_variants())
    watched.page.screenshot(path=str(artifacts / "gallery-whole-zoo.png"), full_page=True)
    for name in shown:
        watched.page.goto((tmp_path / "site" / "variants" / f"{name}.html").as_uri())
        assert watched.broken_images() == [], name
    watched.page.goto((tmp_path / "site" / "puzzle.html").as_uri())
    assert watched.image_count() == 7 and watched.broken_images() == []
    assert watched.errors == []


def test_sampling_page_with_an_api_key_and_a_cross_origin_page(browser, monkeypatch):
    """A keyed server: the page asks for the key and sends it; a page of another origin
    (here `localhost` for a server reached as `127.0.0.1`) cannot make it compute."""
    import json
    import urllib.request

    monkeypatch.setenv("ZOO_API_KEY", "browser-key")
    server = Server()
    try:
        watched = _Watched(browser)
        page = watched.page
        page.goto(server.url + "/sample")
        page.select_option("#model", SMALL)
        page.fill("#max_tokens", "5")
        page.click("#generate")
        page.wait_for_selector("#status[data-state]", timeout=60_000)
        assert "API key" in page.inner_text("#status")  # refused, and the page says why
        page.fill("#api_key", "browser-key")
        page.click("#generate")
        page.wait_for_function("document.getElementById('status').dataset.state === 'done'", timeout=60_000)

        def refused_before_routing() -> float:
            request = urllib.request.Request(server.url + "/metrics", headers={"Authorization": "Bearer browser-key"})
            with urllib.request.urlopen(request, timeout=30) as response:
                text = response.read().decode()
            return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                       if line.startswith("zoo_http_requests_total{") and 'status="403"' in line)

        before = refused_before_routing()
        other = browser.new_page()
        other.goto(f"http://localhost:{server.port}/health")  # another origin, same machine
        body = json.dumps({"model": SMALL, "prompt": "ROMEO:", "max_tokens": 5})
        # The "simple request" any page may send: no preflight, the answer unreadable.
        other.evaluate("""([url, body]) => fetch(url, {method: "POST", mode: "no-cors", body: body,
                          headers: {"Content-Type": "text/plain"}}).catch(() => null)""",
                       [server.url + "/v1/completions", body])
        assert refused_before_routing() == before + 1
        other.close()
    finally:
        server.stop()
