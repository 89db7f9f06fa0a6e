"""The shipped catalogue: every variant lists, loads, verifies and samples."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

import zoo_core
from zoo_core.catalogue.cards import ModelCard
from zoo_core.storage.checkpoints import header_card

from .conftest import ROOT

SEED_000_VARIANTS = [
    "bigram",
    "transformer-1b-learned-ctx8",
    "transformer-2b-learned-ctx8",
    "transformer-4b-learned-ctx8",
    "transformer-6b-learned-ctx8",
    "transformer-8b-learned-ctx8",
    "transformer-1b-learned-post-ctx8",
    "transformer-4b-learned",
    "transformer-4b-learned-ctx128",
    "transformer-4b-learned-ctx256",
    "transformer-6b-nopos",
    "transformer-6b-sin",
]


def test_list_does_not_import_torch():
    code = (
        "import sys\n"
        "from zoo_core.cli import main\n"
        "assert main(['list']) == 0\n"
        "assert 'torch' not in sys.modules, 'zoo list imported torch'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    for name in SEED_000_VARIANTS:
        assert name in result.stdout


def test_list_columns_and_wildcard(zoo):
    result = zoo("list", "transformer-4b-*")
    assert result.code == 0
    header = result.out.splitlines()[0].split()
    assert header[:6] == ["name", "architecture", "layers", "positions", "norm", "context"]
    names = [line.split()[0] for line in result.out.splitlines()[2:]]
    assert names == ["transformer-4b-learned-ctx8", "transformer-4b-learned", "transformer-4b-learned-ctx128", "transformer-4b-learned-ctx256"]


def test_list_json_carries_card_facts(zoo):
    rows = {row["name"]: row for row in json.loads(zoo("list", "--json").out)}
    sin = rows["transformer-6b-sin"]
    assert (sin["layers"], sin["positions"], sin["norm"], sin["context"]) == (6, "sinusoidal", "pre-LN", 32)
    assert rows["transformer-1b-learned-post-ctx8"]["norm"] == "post-LN"
    assert sin["validation_data"] == "tinyshakespeare" and rows["gpt-char"]["validation_data"] is None  # no weights


def test_list_no_match_is_an_error(zoo):
    result = zoo("list", "nothing-*")
    assert result.code == 1 and "no variant matches" in result.err


SHIPPED = [card.name for card in zoo_core.list_variants() if card.checkpoint.sha256]


def test_catalogue_holds_the_seed_variants():
    expected = {*SEED_000_VARIANTS, "puzzle-disobeys", "puzzle-disobeys-nopos", "gpt-char-mini", "gpt-char-mini-rope"}
    assert expected <= set(SHIPPED)
    assert "gpt-char" in {card.name for card in zoo_core.list_variants()}  # its recipe, awaiting a GPU


def test_seed_004_cards_beat_the_uniform_baseline_and_nanogpt():
    cards = {card.name: card for card in zoo_core.list_variants("gpt-char*")}
    for name in ("gpt-char-mini", "gpt-char-mini-rope"):
        metrics = cards[name].metrics
        assert metrics.validation_loss < 1.88  # nanoGPT's figure for this CPU configuration
        assert metrics.uniform_loss == pytest.approx(math.log(65), abs=1e-4)
        assert metrics.validation_perplexity == pytest.approx(math.exp(metrics.validation_loss), rel=1e-3)
    assert cards["gpt-char"].recipe.steps == 5000 and cards["gpt-char"].config["dropout"] == 0.2


FAMILY_MEMBERS = {  # docs/families.md: gpt-char-mini's size and recipe in each family's layout
    "llama-char-mini": {"n_kv_head": 2, "mlp": "swiglu", "norm": "rmsnorm", "positions": "rope", "tie_embeddings": False},
    "neox-char-mini": {"residual": "parallel", "rotary_fraction": 0.25, "norm": "layernorm", "mlp": "gelu"},
    "mistral-char-mini": {"n_kv_head": 2, "mlp": "swiglu", "norm": "rmsnorm", "sliding_window": 16},
}


@pytest.mark.parametrize("name", FAMILY_MEMBERS)
def test_the_family_members_are_gpt_char_mini_in_other_layouts(name):
    cards = {card.name: card for card in zoo_core.list_variants("*char-mini")}
    mini, card = cards["gpt-char-mini"], cards[name]
    assert name in SHIPPED and card.metrics.validation_bits_per_byte
    assert {key: card.config[key] for key in FAMILY_MEMBERS[name]} == FAMILY_MEMBERS[name]
    assert card.parameters == pytest.approx(mini.parameters, rel=0.02)
    assert (card.context_length, card.tokenizer) == (mini.context_length, mini.tokenizer)
    ignored = {"notes", "data_sha256"}
    assert card.recipe.model_dump(exclude=ignored) == mini.recipe.model_dump(exclude=ignored)
    assert card.metrics.validation_loss < 1.88  # nanoGPT's figure for gpt-char-mini's recipe
    if name == "mistral-char-mini":
        assert card.config["sliding_window"] < card.context_length  # the window is what differs from Llama


@pytest.mark.parametrize("name", FAMILY_MEMBERS)
def test_a_family_member_trains_from_its_card(zoo, tmp_path, name):
    """`zoo train NAME` (docs/families.md) runs the card's recipe; two steps here."""
    done = zoo("train", name, "--steps", "2", "--set", "eval_windows=8", "--out", str(tmp_path), "--quiet")
    assert done.code == 0, done.err
    assert (tmp_path / f"{name}.safetensors").is_file() and f"{name}: train " in done.out


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_variant_loads_verified(name):
    model = zoo_core.load(name)
    tokenizer_checked = ["tokenizer sha256"] if model.card.tokenizer.file else []  # the puzzle's vocabulary is code
    assert model.verification.checks == ["sha256", "names", "shapes", "parameters", *tokenizer_checked]
    assert model.parameters() == model.card.parameters


@pytest.mark.parametrize("name", SHIPPED)
def test_checkpoint_header_holds_the_card(name):
    variant = zoo_core.get_variant(name)
    stored = ModelCard.model_validate(header_card(variant.checkpoint_path))
    card = variant.card
    # The registry has since gained checksums (tokenizer, text) and the dataset's
    # name in place of its path; everything that identifies the weights is unchanged.
    written_before = {"tokenizer": {"sha256"}, "recipe": {"data_sha256"}}
    registry_side = card.weight_fields()
    for section, keys in written_before.items():
        for key in keys:
            if key not in stored.weight_fields()[section]:
                registry_side[section].pop(key, None)
    assert stored.weight_fields() == registry_side
    assert stored.checkpoint.path == card.checkpoint.path and stored.description == card.description


def test_shipped_cards_rank_as_seed_000_expects():
    cards = {card.name: card for card in zoo_core.list_variants()}
    bigram = cards["bigram"].metrics.validation_loss
    for name in SEED_000_VARIANTS[1:]:
        assert cards[name].metrics.validation_loss < bigram, name
    assert cards["transformer-6b-sin"].metrics.validation_loss < cards["transformer-6b-nopos"].metrics.validation_loss
    for card in cards.values():
        if card.recipe.kind == "trained" and card.checkpoint.sha256:
            assert card.metrics.train_loss and card.metrics.training_seconds
            assert card.metrics.validation_loss < math.log(card.tokenizer.vocab_size)


def test_load_summary(zoo):
    result = zoo("load", "transformer-6b-sin", "--json")
    summary = json.loads(result.out)
    assert result.code == 0
    assert summary["verified"] == ["sha256", "names", "shapes", "parameters", "tokenizer sha256"]
    assert summary["parameters"] == zoo_core.get_variant("transformer-6b-sin").card.parameters


def test_show_prints_the_card(zoo):
    result = zoo("show", "transformer-6b-sin")
    assert result.code == 0
    assert "[transformer-6b-sin.config]" in result.out and 'positions = "sinusoidal"' in result.out
    assert json.loads(zoo("show", "bigram", "--json").out)["architecture"] == "bigram"


def test_markdown_table_for_the_readme(zoo):
    result = zoo("list", "puzzle-*", "--markdown")
    lines = result.out.splitlines()
    assert lines[0].startswith("| name | architecture |") and len(lines) == 4
    assert "| `puzzle-disobeys` | puzzle |" in lines[2] and lines[2].endswith("accuracy 100% | — |")


def test_an_architecture_says_what_zoo_list_shows_of_its_cards():
    """`zoo list`'s layers, positions and norm columns come from register_models'
    ``listed=`` (a setting's name, or a function of the config), never from the core."""
    from zoo_core import hookimpl
    from zoo_core.cli.catalogue import _architecture_columns
    from zoo_core.plugin_api.manager import PluginInfo, PluginSet

    class Plugin:
        @hookimpl
        def register_models(register):
            listed = {"layers": "depth", "norm": lambda config: f"{config['where']}-norm", "positions": "absent"}
            register("listed-net", "nowhere.to.import:build", listed=listed)
            register("silent-net", "nowhere.to.import:build")

    plugins = PluginSet()
    plugins.add_plugin(Plugin, PluginInfo("listing", "zoo-listing", "1", False))
    config = {"depth": 7, "where": "sandwich", "positions": "rope"}
    shown = _architecture_columns({"architecture": "listed-net", "config": config}, plugins)
    assert shown == {"layers": 7, "positions": "-", "norm": "sandwich-norm"}
    silent = _architecture_columns({"architecture": "silent-net", "config": config}, plugins)
    assert silent == {"layers": "-", "positions": "-", "norm": "-"}  # the core reads no setting by its name
    # A function that fails on a card it did not expect blanks its cell, not the listing.
    assert _architecture_columns({"architecture": "listed-net", "config": {}}, plugins)["norm"] == "-"
