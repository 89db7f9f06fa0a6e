"""What a user makes the README's way, exported and merged: a fine-tune, a
``--skip-unknown`` fine-tune, a LoRA adapter on it and that adapter merged
(`zoo merge`); their cards, and the Hub README's code run as written.

The four variants are trained once for the module, a few steps each on a text
with characters gpt-char-mini's vocabulary lacks, into a user catalogue of the
module's own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
import shlex
import stat

import pytest
import torch

pytest.importorskip("transformers", reason="the interop extra is not installed: pip install -e '.[interop]'")

import zoo_core  # noqa: E402
from zoo_core import cli  # noqa: E402
from zoo_core.catalogue.registry import Variant  # noqa: E402
from zoo_core.errors import ZooError  # noqa: E402
from zoo_core.interop.hf import export_hf  # noqa: E402
from zoo_core.loading.merging import LOGIT_TOLERANCE  # noqa: E402

from .conftest import ROOT  # noqa: E402
from .test_fine_tuning import BASE, own_text  # noqa: E402

DOC = (ROOT / "docs" / "training.md").read_text(encoding="utf-8")
QUICK = ("--steps", "2", "--set", "eval_windows=8", "--quiet")
# Every variant the README's fine-tuning section makes, and how.
MADE = {
    "mine": ("train", "mine", "--from", BASE, "--data", "cats", *QUICK),
    "accents": ("train", "accents", "--from", BASE, "--data", "accents", "--skip-unknown", *QUICK),
    "my-lora": ("train", "my-lora", "--from", "accents", "--trainer", "lora", "--data", "accents",
                     "--skip-unknown", *QUICK),
    # As docs/training.md writes it.
    "my-lora-merged": tuple(shlex.split(re.search(r"^zoo (merge .*)$", DOC, re.MULTILINE).group(1))),
}


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """The module's user catalogue, holding the four variants of MADE."""
    folder = tmp_path_factory.mktemp("fine-tunes")
    cats, accents = folder / "cats.txt", folder / "accents.txt"
    cats.write_text(own_text(), encoding="utf-8")
    # Accents in every part of the text: the validation split an export checks itself on has them too.
    accents.write_text(own_text().replace(".\n", ". Café, naïve café.\n"), encoding="utf-8")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ZOO_HOME", str(folder / "home"))
        patch.setenv("ZOO_CACHE", str(folder / "cache"))
        for name, path in (("cats", cats), ("accents", accents)):
            assert cli.main(["datasets", "add", name, str(path)]) == 0
        for command in MADE.values():
            assert cli.main(list(command)) == 0, command
    return folder


@pytest.fixture(autouse=True)
def catalogue_of_the_module(home, monkeypatch):
    monkeypatch.setenv("ZOO_HOME", str(home / "home"))
    monkeypatch.setenv("ZOO_CACHE", str(home / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing may be fetched
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def _readme_snippet(folder) -> str:
    """The README's python block, with its placeholder PATH as the exported folder."""
    readme = (folder / "README.md").read_text(encoding="utf-8")
    (code,) = re.findall(r"```python\n(.*?)```", readme, re.DOTALL)
    return code.replace('"PATH"', repr(str(folder)))


@pytest.mark.parametrize("name", list(MADE))
def test_every_kind_of_variant_exports_and_the_hub_readme_runs_as_written(zoo, name, tmp_path):
    folder = tmp_path / "hf"
    result = zoo("export", name, "--format", "hf", "--out", str(folder))
    assert result.code == 0, result.err
    assert "tokenizer ids identical" in result.out
    generation = json.loads((folder / "generation_config.json").read_text())
    assert generation["max_length"] == 64 and generation["pad_token_id"] == 0
    assert generation.get("eos_token_id") is None  # no vocabulary here has an end-of-text token
    usual = 0o666 & ~_umask()
    assert {path.name: stat.S_IMODE(path.stat().st_mode) for path in folder.iterdir()} == {
        path.name: usual for path in folder.iterdir()
    }
    assert stat.S_IMODE(folder.stat().st_mode) == 0o777 & ~_umask()

    printed = io.StringIO()
    torch.manual_seed(0)
    with contextlib.redirect_stdout(printed):
        exec(compile(_readme_snippet(folder), "README.md", "exec"), {})
    sample = printed.getvalue().rstrip("\n")
    assert sample.startswith("ROMEO:")
    model = zoo_core.load(name)
    assert len(model.tokenizer.encode(sample)) == 64  # generated to the window, and not one token past it

    lens = zoo("export", name, "--format", "transformer-lens", "--out", str(tmp_path / "lens"))
    assert lens.code == 0, lens.err


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def test_an_export_that_meets_a_character_its_card_does_not_drop_says_why(tmp_path):
    """A card that does not record skip_unknown (one written before the zoo recorded
    it) for a text with characters its vocabulary lacks: one line saying what to do."""
    model = zoo_core.load("accents")
    card = model.card
    older = card.model_copy(update={"recipe": card.recipe.model_copy(update={"skip_unknown": None})})
    variant = Variant(older, model.variant.source, model.variant.plugin, layer=model.variant.layer)
    with pytest.raises(ZooError, match=r"not in the vocabulary.*recipe.skip_unknown is not set.*--skip-unknown"):
        export_hf(dataclasses.replace(model, variant=variant), tmp_path / "hf")


def test_a_fine_tunes_card_says_what_it_is_and_so_does_its_hub_readme(zoo, tmp_path):
    card = zoo_core.get_variant("accents").card
    base = zoo_core.get_variant(BASE).card
    assert card.description == f"Fine-tuned from '{BASE}' on accents for 2 steps."
    assert card.lineage.startswith(f"fine-tuned from '{BASE}' (checkpoint sha256 {base.checkpoint.sha256})")
    assert base.recipe.notes and card.recipe.notes == ""
    assert [tag for tag in base.tags if tag.startswith("seed-")] and not [t for t in card.tags if t.startswith("seed-")]
    assert "fine-tuned" in card.tags

    assert zoo("export", "accents", "--format", "hf", "--out", str(tmp_path / "hf")).code == 0
    readme = (tmp_path / "hf" / "README.md").read_text(encoding="utf-8")
    assert card.description in readme and card.lineage in readme
    for inherited in (base.description, base.recipe.notes, "seed-004"):
        assert inherited not in readme


def test_zoo_merge_makes_a_standalone_variant_with_the_adapters_logits(zoo):
    merged = zoo_core.get_variant("my-lora-merged")
    adapter = zoo_core.get_variant("my-lora").card
    card = merged.card
    assert card.adapter is None and merged.layer == "user"
    assert f"'my-lora' (checkpoint sha256 {adapter.checkpoint.sha256})" in card.lineage
    assert f"base 'accents' (checkpoint sha256 {adapter.adapter.base_sha256})" in card.lineage
    assert card.parameters == zoo_core.get_variant("accents").card.parameters
    assert "merged" in card.tags and "adapter" not in card.tags

    ids = torch.tensor([zoo_core.load("accents").tokenizer.encode("ROMEO: the cat sat on a mat")])
    with torch.no_grad():
        on_the_fly = zoo_core.load("my-lora").network(ids)[0]
        standalone = zoo_core.load("my-lora-merged").network(ids)[0]
    assert float((on_the_fly - standalone).abs().max()) <= LOGIT_TOLERANCE


@pytest.mark.parametrize("arguments, message", [
    (("merge", "accents", "--name", "x"), "'accents' is not an adapter variant"),
    (("merge", "my-lora", "--name", "my-lora-merged"), "already exists"),
    (("merge", "my-lora", "--name", "Bad Name"), "a variant name is"),
])
def test_zoo_merge_refuses_in_one_line(zoo, arguments, message):
    result = zoo(*arguments)
    assert result.code == 1 and result.err.count("\n") == 1 and message in result.err, result.err


def test_list_show_and_compare_count_an_adapters_parameters_alike(zoo):
    own = zoo_core.get_variant("my-lora").card.parameters
    base = zoo_core.get_variant("accents").card.parameters
    listed = {row["name"]: row["parameters"] for row in json.loads(zoo("list", "--json").out)}
    assert listed["my-lora"] == own
    shown = zoo("show", "my-lora").out
    assert f"# parameters: {own:,} of the adapter's own, applied to base 'accents' ({base:,} parameters)" in shown
    compared = zoo("compare", "accents", "my-lora", "--windows", "4", "--max-new-tokens", "2", "--json")
    assert compared.code == 0, compared.err
    counts = {m["name"]: (m["parameters"], m.get("base_parameters")) for m in json.loads(compared.out)["models"]}
    assert counts == {"accents": (base, None), "my-lora": (own, base)}
    table = zoo("compare", "accents", "my-lora", "--windows", "4", "--max-new-tokens", "2").out
    assert f"{own:,} (+{base:,} base)" in table


def test_list_by_dataset_finds_adapters_and_merges_trained_on_it(zoo):
    listed = zoo("list", "--dataset", "accents", "--json")
    assert [row["name"] for row in json.loads(listed.out)] == ["accents", "my-lora", "my-lora-merged"]
