"""No silent overwrite: publishing onto a name that already has weights in the
user catalogue (`zoo train NAME --from BASE`, `--name NAME`, `zoo import`) is
refused in one line naming the variant and its steps unless `--replace` is
given; `zoo install` refuses any existing name. With `--replace` the crash-safe
publishing path (zoo_core/catalogue/publishing.py) keeps the old weights, card
and log until the new card is committed: test_crash_safety.py kills a
`--replace` publish at every file operation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import zoo_core

from .conftest import ROOT
from .test_crash_safety import _nanogpt_checkpoint

QUICK = ("--set", "eval_windows=8", "--quiet")


def _one_line_error(result, *fragments):
    assert result.code == 1, result.out
    assert result.err.startswith("zoo: error: ") and result.err.count("\n") == 1, result.err
    for fragment in fragments:
        assert fragment in result.err, result.err


def _snapshot(home: Path) -> dict[str, bytes]:
    return {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file()}


@pytest.fixture
def text(tmp_path) -> Path:
    path = tmp_path / "verses.txt"
    path.write_text((ROOT / "data" / "tinyshakespeare.txt").read_text(encoding="utf-8")[:20_000], encoding="utf-8")
    return path


@pytest.fixture
def tuned(zoo, text, private_home):
    """my-tune: bigram fine-tuned for 6 steps, in the user catalogue."""
    result = zoo("train", "my-tune", "--from", "bigram", "--steps", "6", "--data", str(text), *QUICK)
    assert result.code == 0, result.err
    assert (private_home / "runs" / "my-tune" / "my-tune.log.jsonl").exists()
    return _snapshot(private_home)


def test_a_fine_tune_onto_an_existing_name_is_refused_naming_it_and_its_steps(zoo, text, private_home, tuned):
    again = ("train", "my-tune", "--from", "bigram", "--steps", "1", "--data", str(text), *QUICK)
    _one_line_error(zoo(*again), "variant 'my-tune' already exists in", "registry.toml (trained for 6 steps)",
                    "--replace publishes over it")
    # --name onto it, from another variant, is the same publish.
    _one_line_error(zoo("train", "bigram", "--steps", "1", "--publish", "--name", "my-tune", "--data", str(text), *QUICK),
                    "variant 'my-tune' already exists", "trained for 6 steps")
    assert _snapshot(private_home) == tuned  # weights, card, history and log as they were
    assert zoo_core.get_variant("my-tune").card.recipe.steps == 6


def test_replace_publishes_over_it_and_verifies_clean(zoo, text, private_home, tuned):
    replaced = zoo("train", "my-tune", "--from", "bigram", "--steps", "2", "--data", str(text), "--replace", *QUICK)
    assert replaced.code == 0, replaced.err
    assert zoo_core.get_variant("my-tune").card.recipe.steps == 2
    log = (private_home / "runs" / "my-tune" / "my-tune.log.jsonl").read_text().splitlines()
    assert json.loads(log[-1])["kind"] == "end"
    assert zoo("verify", "my-tune").code == 0


def test_an_import_onto_an_existing_name_is_refused_unless_replace(zoo, tmp_path, private_home):
    assert zoo("import", "nanogpt", str(_nanogpt_checkpoint(tmp_path / "old.pt", 1)), "--name", "nano").code == 0
    before = _snapshot(private_home)
    new = str(_nanogpt_checkpoint(tmp_path / "new.pt", 2))
    _one_line_error(zoo("import", "nanogpt", new, "--name", "nano"), "variant 'nano' already exists", "--replace")
    assert _snapshot(private_home) == before
    assert zoo("import", "nanogpt", new, "--name", "nano", "--replace").code == 0
    assert _snapshot(private_home) != before and zoo("verify", "nano").code == 0


def test_an_install_onto_an_existing_name_is_refused(zoo, tmp_path, private_home, tuned):
    packed = zoo("pack", "my-tune", "--out", str(tmp_path / "my-tune.zoo"))
    assert packed.code == 0, packed.err
    _one_line_error(zoo("install", str(tmp_path / "my-tune.zoo")), "variant 'my-tune' already exists", "--name NEW")
    assert _snapshot(private_home) == tuned
