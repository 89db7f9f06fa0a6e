"""`zoo gallery`: a self-contained site written from the real catalogue and checkpoints."""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from html import escape
from html.parser import HTMLParser
from pathlib import Path

import pytest

pytest.importorskip("jinja2", reason="the gallery needs the web extra: pip install 'zoo-lm[web]'")
pytest.importorskip("markdown", reason="the gallery needs the web extra: pip install 'zoo-lm[web]'")

PATTERN = "*1b-learned*"  # transformer-1b-learned-ctx8 and its post-norm twin: quick to sample
VARIANTS = ["transformer-1b-learned-ctx8", "transformer-1b-learned-post-ctx8"]


class _References(HTMLParser):
    def __init__(self):
        super().__init__()
        self.references: list[str] = []
        self.rows: list[str] = []

    def handle_starttag(self, tag, attributes):
        attributes = dict(attributes)
        for key in ("src", "href"):
            if attributes.get(key):
                self.references.append(attributes[key])
        if tag == "tr" and "data-name" in attributes:
            self.rows.append(attributes["data-name"])


def _parse(path: Path) -> _References:
    parser = _References()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def _gallery(out: Path, cache: Path, pattern: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zoo_core.cli", "gallery", "--out", str(out), "--variants", pattern,
                           "--cache", str(cache), "--quiet"], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("gallery")
    done = _gallery(root / "site", root / "cache", PATTERN)
    assert done.returncode == 0, done.stderr
    return root / "site", root / "cache", done


def test_index_lists_the_variants_and_links_only_local_files(site):
    out, _, done = site
    assert "2 variants, 4 studies" in done.stdout
    index = _parse(out / "index.html")
    assert index.rows == VARIANTS
    pages = sorted(out.rglob("*.html"))
    assert {p.name for p in (out / "variants").iterdir()} == {f"{v}.html" for v in VARIANTS}
    assert {p.stem for p in (out / "studies").iterdir()} == {"depth-1-2", "depth-4-6-8", "context", "positions"}
    for page in pages:
        for reference in _parse(page).references:
            assert not re.match(r"^[a-z]+:", reference), f"{page.name} refers outside the site: {reference}"
            target = (page.parent / reference.split("#")[0]).resolve()
            assert target.is_file(), f"{page.name}: broken link {reference}"
    for text_file in [*pages, *out.rglob("*.css"), *out.rglob("*.js")]:
        assert "http://" not in text_file.read_text().replace('xmlns="http://www.w3.org/2000/svg"', "")
        assert "https://" not in text_file.read_text(), text_file


def test_variant_page_shows_card_curves_samples_attention_and_bigram(site):
    out, _, _ = site
    page = (out / "variants" / "transformer-1b-learned-ctx8.html").read_text()
    images = [r for r in _parse(out / "variants" / "transformer-1b-learned-ctx8.html").references if r.endswith(".svg")]
    assert any("loss" in i for i in images)
    assert sum("attention" in i for i in images) == 2  # one layer of two heads
    for image in images:
        root = ElementTree.parse(out / "variants" / image).getroot()
        assert root.tag.endswith("svg") and len(root) > 3
    # The samples are what `zoo sample` draws with the same seed.
    from zoo_core.loading.api import load

    model = load("transformer-1b-learned-ctx8")
    from html import escape

    assert escape(model.generate("ROMEO:", max_new_tokens=60, seed=1), quote=False) in page
    assert "Against the bigram on the same windows" in page
    # ... and the comparison is what `zoo compare` reports for those windows.
    from zoo_core.evaluation.compare import compare_variants

    report = compare_variants(["bigram", "transformer-1b-learned-ctx8"], windows=128, seed=42, max_new_tokens=1)
    for model_report in report["models"]:
        assert f"{model_report['validation_loss']:.4f}" in page and f"{model_report['train_loss']:.4f}" in page
    assert "seed 000_c92b2adfc54d4d80" in page  # lineage


def test_variant_page_shows_the_logit_lens_and_head_ablation(site):
    """What zoo_core.inspection computes, drawn: the same numbers as calling it directly."""
    import torch

    from zoo_core.inspection.ablation import ablate_heads, every_head
    from zoo_core.inspection.logit_lens import logit_lens
    from zoo_core.loading.api import load
    from zoo_core.web.gallery import ABLATION_WINDOWS, ATTENTION_PROMPT

    out, _, _ = site
    path = out / "variants" / "transformer-1b-learned-ctx8.html"
    page = path.read_text()
    assert "<h2>Logit lens</h2>" in page and "<h2>Head ablation</h2>" in page
    images = [r for r in _parse(path).references if r.endswith(".svg")]
    assert any(i.endswith("-logit-lens.svg") for i in images) and any(i.endswith("-ablation.svg") for i in images)
    model = load("transformer-1b-learned-ctx8")
    report = ablate_heads(model, every_head(model), "zero", windows=ABLATION_WINDOWS)
    assert len(report.ablations) == 2  # one layer of two heads
    for ablation in report.ablations:
        assert f"{ablation.delta:+.4f}" in page
    lens = logit_lens(model, torch.tensor([model.encode_prompt(ATTENTION_PROMPT)[-model.card.context_length :]]))
    assert lens.layers == ["embeddings", "block 0"]
    for prediction in lens.predictions[-1]:
        assert f"<code>{escape(prediction, quote=False)}</code>" in page


def _gallery_here(capsys, out: Path, cache: Path, pattern: str) -> tuple[int, str, str]:
    """The same command in this process (torch is imported once for the module)."""
    from zoo_core.cli import main

    code = main(["gallery", "--out", str(out), "--variants", pattern, "--cache", str(cache), "--quiet"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_second_run_reuses_the_cache(site, tmp_path, capsys):
    out, cache, _ = site
    code, stdout, _ = _gallery_here(capsys, tmp_path / "again", cache, PATTERN)
    assert code == 0
    assert "2 from cache" in stdout
    assert (tmp_path / "again" / "variants" / "transformer-1b-learned-ctx8.html").read_text() == \
        (out / "variants" / "transformer-1b-learned-ctx8.html").read_text()


def test_puzzle_page_shows_slots_heads_and_answers(tmp_path, capsys):
    assert _gallery_here(capsys, tmp_path / "site", tmp_path / "cache", "puzzle-*")[0] == 0
    page = (tmp_path / "site" / "puzzle.html").read_text()
    assert "previous_word_is_disobey" in page and "pos5" in page  # slots
    assert "previous_word" in page and "flight" in page  # heads
    # Word order changes the answer only with positions: the two columns differ.
    row = re.search(r"Crow keep-flight disobeys swap-speech he-is\?</code></td>(.*?)</tr>", page).group(1)
    answers = re.findall(r"<code>(\w+)", row)
    assert len(answers) == 2 and answers[0] != answers[1]
    # The explanation checked by ablation: every role holds with positions; without,
    # the previous-word head is absent and the layer-2 heads' roles fail.
    assert "The explanation, checked by ablation" in page
    verdicts = re.findall(r'class="verdict-(\w+)"', page)
    assert verdicts == ["holds"] * 4 + ["holds", "absent", "fails", "fails"]


def test_no_match_is_one_clear_error(tmp_path, capsys):
    code, _, stderr = _gallery_here(capsys, tmp_path / "site", tmp_path / "cache", "no-such-*")
    assert code == 1
    assert stderr.strip() == "zoo: error: no variant matches 'no-such-*'"


def test_a_hostile_history_on_disk_costs_only_its_chart(site, tmp_path, capsys, private_catalogue):
    """Histories that once ended the gallery in AttributeError, KeyError or
    RecursionError: each is one warning line, and the page is written without its chart."""
    _, cache, _ = site
    folder = private_catalogue.parent / "checkpoints"
    (folder / "transformer-1b-learned-ctx8.history.json").write_text("[" * 100_000 + "]" * 100_000)
    (folder / "transformer-1b-learned-post-ctx8.history.json").write_text('{"variant": 1, "history": "rows"}')
    code, stdout, stderr = _gallery_here(capsys, tmp_path / "site", cache, PATTERN)
    assert code == 0, stderr
    warnings = stderr.splitlines()
    assert len(warnings) == 2, stderr
    assert warnings[0].startswith("zoo: warning: variant 'transformer-1b-learned-ctx8': ")
    assert "recursion limit exceeded" in warnings[0] and warnings[0].endswith("its loss chart is left out")
    assert "variant 'transformer-1b-learned-post-ctx8'" in warnings[1] and "not a training history" in warnings[1]
    assert _parse(tmp_path / "site" / "index.html").rows == VARIANTS
    assert not list((tmp_path / "site" / "img").glob("*-loss.svg"))


def test_the_index_compares_in_bits_per_byte_and_shows_each_results_csv(site, tmp_path, capsys):
    """Each CSV of --results (a study's table) is a table of its own columns, numbers
    sortable as numbers, variants linked; a CSV that is not a table costs one line."""
    from zoo_core.web.gallery import write_gallery

    _, cache, _ = site
    results = tmp_path / "results"
    results.mkdir()
    (results / "study.csv").write_text("variant,parameters,bits_per_byte,note\n"
                                       "transformer-1b-learned-ctx8,79456,2.5184,a\nelsewhere,1000,,b\n")
    (results / "broken.csv").write_text("a,b\n1\n")
    report = write_gallery(tmp_path / "site", pattern=PATTERN, cache=cache, quiet=True, results=results)
    assert report["results"] == 1
    assert "broken.csv: not a table of 2 columns; it is left out" in capsys.readouterr().err
    index = (tmp_path / "site" / "index.html").read_text()
    table = index[index.index('<table id="results-study"'):]
    table = table[: table.index("</table>")]
    headers = re.findall(r'<th class="sortable( num)?" data-type="(\w+)">([^<]+)</th>', table)
    assert headers == [("", "text", "variant"), (" num", "number", "parameters"), (" num", "number", "bits_per_byte"),
                       ("", "text", "note")]
    assert '<a href="variants/transformer-1b-learned-ctx8.html">transformer-1b-learned-ctx8</a>' in table
    assert '<td data-value="elsewhere">elsewhere</td>' in table  # not in this gallery: no link
    # The variants table compares in bits per byte too, from each card's metrics.
    assert 'data-type="number">bits/byte</th>' in index
    assert '<td class="num" data-value="2.5184">2.5184</td>' in index
