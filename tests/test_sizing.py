"""Measurements sized to the model (issues 56 and 58): eval, inspect and the gallery within
a compute budget and a memory bound (zoo_core.evaluation.budget), the built-in variants'
defaults unchanged, explicit requests that would not fit refused in one line, and
`zoo serve`'s gallery built beside the server without slowing its completions.

The SmolLM2 tests run the real import (``smollm2_home``) with the commands' defaults, in a
fresh process each, their peak memory read from the kernel (tests/peak_memory.py)."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zoo_core.evaluation.budget import COMPUTE_BUDGET, default_context, shape_of, size_windows
from zoo_core.evaluation.scoring import recipe_windows
from zoo_core.inspection.ablation import SWEEP_MIN_CONTEXT, every_head
from zoo_core.loading.api import catalogue, has_published_weights, load
from zoo_core.web import gallery
from zoo_core.web.generation import is_task_model

from .conftest import ROOT

NAME = "smollm2-135m-instruct"
GiB = 1024  # MiB


def test_the_built_in_variants_keep_their_defaults():
    """Every built-in language model fits the budget whole: its eval, ablation sweep and
    gallery page read what they read before (the recipe's windows, the card's context)."""
    checked = 0
    for variant in catalogue():
        if variant.layer != "built-in" or not has_published_weights(variant):
            continue
        model = load(variant.name)
        if is_task_model(model):
            continue
        shape = shape_of(model)
        windows = recipe_windows(model.card)
        scored = size_windows(shape, None, None, windows, passes=2, budget=COMPUTE_BUDGET / 2)
        assert (scored.windows, scored.context, scored.sized) == (windows, shape.context, False), variant.name
        assert scored.batch_size == 64 and default_context(shape) == shape.context
        assert gallery.sample_tokens(model.parameters()) == gallery.SAMPLE_TOKENS
        if variant.name == "bigram":
            continue
        heads = every_head(model)
        sweep = size_windows(shape, None, None, windows, passes=len(heads) + 1, min_context=SWEEP_MIN_CONTEXT)
        assert (sweep.windows, sweep.context, sweep.sized) == (windows, shape.context, False), variant.name
        assert gallery._ablation_plan(model, heads) == (heads, gallery.ABLATION_WINDOWS, shape.context)
        checked += 1
    assert checked >= 15


# -- zoo serve: the gallery built in a low-priority child --------------------------------------


def _completion_seconds(url: str, rounds: int = 12) -> float:
    import httpx

    body = {"model": "bigram", "prompt": "ROMEO:", "max_tokens": 8}
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        assert httpx.post(url + "/v1/completions", json=body, timeout=60).status_code == 200
        times.append(time.perf_counter() - started)
    return statistics.median(times)


@pytest.mark.slow
def test_completions_keep_their_speed_while_the_gallery_builds(tmp_path):
    """The same completions timed on a server building its gallery (a fresh cache: every
    variant measured) and on one without, in the same run, rounds interleaved."""
    pytest.importorskip("starlette", reason="zoo serve needs the web extra")
    from .web_support import Server

    building = Server(environment={"ZOO_CACHE": str(tmp_path / "cache")}, gallery=True)
    plain = Server(environment={"ZOO_CACHE": str(tmp_path / "plain-cache")})
    try:
        import httpx

        deadline = time.monotonic() + 120  # the child has imported torch and is measuring: its progress shows
        while "variant pages written" not in (page := httpx.get(building.url + "/", timeout=30)).text:
            assert time.monotonic() < deadline, page.text
            time.sleep(0.5)
        assert page.status_code == 503
        with_build, without = [], []
        for _ in range(3):
            assert building.get_json("/health")["gallery"] == "building"  # still under way: this round counts
            with_build.append(_completion_seconds(building.url))
            without.append(_completion_seconds(plain.url))
    finally:
        building.stop()
        plain.stop()
    slower, usual = statistics.median(with_build), statistics.median(without)
    print(f"median completion: {slower * 1000:.1f} ms while building, {usual * 1000:.1f} ms without "
          f"(load {os.getloadavg()[0]:.1f})")
    assert slower < max(2.0 * usual, usual + 0.05), (with_build, without)


# -- the real SmolLM2, with the commands' defaults ------------------------------------------------


def _peak(arguments: list[str], home: Path, cwd: Path, start: str | None = None) -> tuple[dict, str]:
    """`zoo ARGUMENTS` in a fresh process on ``home``'s catalogue: (its peak memory, its stdout)."""
    environment = {**os.environ, "ZOO_REGISTRY": str(home / "registry.toml"), "PYTHONPATH": str(ROOT),
                   "ZOO_WORKDIR": str(cwd), "ZOO_CACHE": str(cwd / "cache")}
    done = subprocess.run([sys.executable, "-m", "tests.peak_memory", *(["--from", start] if start else []),
                           *arguments], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    *output, last = done.stdout.strip().splitlines()
    return json.loads(last), "\n".join(output)


@pytest.mark.slow
@pytest.mark.smollm2
def test_eval_and_an_ablation_sweep_of_smollm2_with_their_defaults(smollm2_home, tmp_path):
    """Before: eval silent for 7 minutes up to 18 GiB; --ablate each past 8 GB, then a traceback."""
    memory, out = _peak(["eval", NAME, "--json"], smollm2_home, tmp_path)
    report = json.loads(out)
    assert memory["code"] == 0 and memory["peak_mib"] < 3 * GiB, memory  # the model is 0.5 GiB of float32
    assert report["windows"] < 320 and "sized to the budget" in report["sizing"], report
    assert 0.5 < report["validation_bits_per_byte"] < 3, report
    memory, out = _peak(["inspect", NAME, "--ablate", "each", "--json"], smollm2_home, tmp_path)
    ablation = json.loads(out)["ablation"]
    assert memory["peak_mib"] < 3 * GiB, memory
    assert len(ablation["ablations"]) == 270 and "sized to the budget" in ablation["sizing"], ablation["sizing"]


@pytest.mark.slow
@pytest.mark.smollm2
def test_a_context_that_would_not_fit_is_refused_naming_the_option(zoo, smollm2_home, monkeypatch):
    monkeypatch.setenv("ZOO_REGISTRY", str(smollm2_home / "registry.toml"))
    refused = zoo("eval", NAME, "--context", "8192")
    assert refused.code == 1 and refused.err.count("\n") == 1, refused.err
    assert "one window of 8,192 tokens" in refused.err and "lower --context" in refused.err, refused.err


CHROMIUM = os.environ.get("ZOO_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


@pytest.mark.slow
@pytest.mark.smollm2
def test_a_gallery_with_smollm2_in_the_catalogue_in_headless_chromium(smollm2_home, tmp_path):
    """The whole catalogue's gallery, SmolLM2's page within the budget and 2 GiB above the
    model; its page shows the card, a sample, its measured views (each saying on what), and
    the index its bits per byte beside the Shakespeare variants'; then the same in Chromium."""
    pytest.importorskip("jinja2", reason="the gallery needs the web extra")
    site = tmp_path / "site"
    memory, _ = _peak(["gallery", "--out", str(site), "--quiet"], smollm2_home, tmp_path)
    assert memory["code"] == 0 and memory["peak_mib"] < 3 * GiB, memory  # the model: 0.5 GiB of float32
    index = (site / "index.html").read_text()
    assert f'data-name="{NAME}"' in index and "measured by the gallery on the first" in index
    page = (site / "variants" / f"{NAME}.html").read_text()
    for part in ("Samples", "in bits per byte", "Attention maps", "Logit lens", "Head ablation", "Card",
                 "of its 270 heads, chosen at random", "this page's budget"):
        assert part in page, part
    sync_api = pytest.importorskip("playwright.sync_api", reason="the browser check needs Playwright")
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"no Chromium at {CHROMIUM} for the browser half: apt-get install chromium (or set ZOO_CHROMIUM)")
    from .test_web_browser import LAUNCH_FLAGS

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_FLAGS)
        view = browser.new_page()
        errors: list[str] = []
        view.on("pageerror", lambda error: errors.append(str(error)))
        view.goto((site / "index.html").as_uri())
        rows = {row.get_attribute("data-name"): row.inner_text() for row in view.query_selector_all("#variants tbody tr")}
        assert NAME in rows and "gpt-char-mini" in rows and "*" in rows[NAME]
        view.goto((site / "variants" / f"{NAME}.html").as_uri())
        text = view.inner_text("body")
        for heading in ("Samples", "in bits per byte", "Attention maps", "Logit lens", "Head ablation", "Card"):
            assert heading in text, heading
        broken = view.evaluate("Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0).length")
        assert broken == 0 and not errors, errors
        browser.close()
