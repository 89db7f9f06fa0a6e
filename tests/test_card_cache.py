"""The card cache: registry files and checkpoint headers validated once, read back
without pydantic while nothing changed, and never a reason for a different answer.

Every test has its own cache folder (ZOO_CACHE, tests/conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import zoo_core.loading.api
from zoo_core.catalogue import card_cache, registry
from zoo_core.storage import checkpoints
from zoo_core.storage.locations import cache_dir

from .conftest import ROOT

NAME = "transformer-1b-learned-ctx8"


@pytest.fixture
def validations(monkeypatch):
    """How many times a registry file was validated with pydantic (a cache miss)."""
    counted = {"files": 0}
    real = registry._validate_registry

    def counting(*args, **kwargs):
        counted["files"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(registry, "_validate_registry", counting)
    return counted


def _entries() -> list[Path]:
    folder = cache_dir() / "cards"
    return sorted(folder.glob("*-registry.toml.json")) if folder.is_dir() else []


def _edit(registry_file: Path, old: str, new: str, after: str) -> None:
    text = registry_file.read_text()
    start = text.index(after)
    at = text.index(old, start)
    registry_file.write_text(text[:at] + new + text[at + len(old):])


def test_a_warm_cache_lists_exactly_what_validation_does(zoo, private_catalogue, validations):
    cold = zoo("list", "--json")
    assert cold.code == 0 and validations["files"] == 1 and len(_entries()) == 1
    warm = zoo("list", "--json")
    assert validations["files"] == 1, "the second listing validated again instead of reading the cache"
    assert warm.out == cold.out
    assert zoo("list", "--markdown").out == zoo("list", "--markdown").out
    assert validations["files"] == 1


def test_cached_index_entries_are_the_validated_cards(private_catalogue):
    zoo_core.loading.api.catalogue()  # fills the cache
    variants = list(zoo_core.loading.api.catalogue())
    assert variants and all(v._card is None for v in variants), "read from the cache, no card validated yet"
    for variant in variants:
        card = variant.card  # validated now, from the cached table
        assert variant.index == card.index_entry() == card.model_dump(mode="json", exclude_none=True)
        assert variant.index["tokenizer"]["vocab_size"] == card.tokenizer.vocab_size
        assert variant.index["metrics"].get("validation_loss") == card.metrics.validation_loss
        assert variant.index["tags"] == card.tags


def test_an_index_entry_is_a_copy_and_a_variant_read_only():
    variant = zoo_core.get_variant(NAME)
    entry = variant.card.index_entry()
    entry["config"]["d_model"] = 999  # a copy: the card does not change
    assert variant.card.config["d_model"] == 32 and variant.card.architecture_config()["d_model"] == 32
    with pytest.raises(AttributeError):
        variant.index = entry


def test_a_cached_variant_pickles_and_copies():
    import copy
    import pickle

    zoo_core.loading.api.catalogue()
    variant = zoo_core.get_variant(NAME)
    for twin in (pickle.loads(pickle.dumps(variant)), copy.deepcopy(variant), copy.copy(variant)):
        assert twin == variant and twin.index["tokenizer"]["kind"] == "bpe" and twin.card == variant.card


def test_an_edit_of_the_same_size_is_seen(zoo, private_catalogue, validations):
    zoo("list", "--json")
    before = private_catalogue.stat().st_size
    _edit(private_catalogue, "description = \"1 pre-norm", "description = \"1 PRE-norm", f"[{NAME}]")
    assert private_catalogue.stat().st_size == before
    shown = json.loads(zoo("show", NAME, "--json").out)
    assert shown["description"].startswith("1 PRE-norm") and validations["files"] == 2
    assert len(_entries()) == 1, "the file's entry was replaced, not joined by another"


def test_an_edit_that_breaks_a_card_is_refused_after_a_warm_cache(zoo, private_catalogue):
    assert zoo("list").code == 0
    _edit(private_catalogue, "n_head = 2", "n_head = 3", f"[{NAME}.config]")
    result = zoo("list")
    assert result.code == 1 and result.err.count("\n") == 1
    assert f"{private_catalogue}: variant '{NAME}': field 'config.n_head': the width d_model = 32 is not divisible by 3 heads" in result.err


@pytest.mark.parametrize("damage", [
    lambda raw: b"",
    lambda raw: raw[: len(raw) // 2],  # cut short
    lambda raw: raw.replace(b'"d_model":32', b'"d_model":64', 1),  # still JSON, no longer what was written
    lambda raw: b"\x00\xff" * 40,
])
def test_a_damaged_entry_is_ignored_and_rewritten(zoo, private_catalogue, validations, damage):
    expected = zoo("list", "--json").out
    [entry] = _entries()
    written = entry.read_bytes()
    entry.write_bytes(damage(written))
    assert zoo("list", "--json").out == expected and validations["files"] == 2
    assert entry.read_bytes() == written  # rewritten whole
    assert zoo("list", "--json").out == expected and validations["files"] == 2


def test_an_entry_for_other_bytes_is_a_miss(zoo, private_catalogue, validations, tmp_path):
    # Another registry's entry put in this one's place (an entry names no file):
    # its key is another file's, so it is never served.
    zoo("list", "--json")
    [entry] = _entries()
    other = tmp_path / "other" / "registry.toml"
    other.parent.mkdir()
    other.write_text(private_catalogue.read_text().replace("(depth study)", "(elsewhere)"))
    registry.read_registry_file(other, "extra", "extra")
    foreign = [e for e in _entries() if e != entry]
    assert len(foreign) == 1
    entry.write_bytes(foreign[0].read_bytes())
    validations["files"] = 0
    assert "(elsewhere)" not in zoo("show", NAME, "--json").out and validations["files"] == 1


@pytest.mark.parametrize("version", [
    ("CARD_SCHEMA_VERSION", card_cache.CARD_SCHEMA_VERSION + 1),  # as after a change to the card model
    ("__version__", "99.0"),  # as after upgrading the zoo
])
def test_a_changed_schema_is_a_miss(zoo, private_catalogue, validations, monkeypatch, version):
    zoo("list", "--json")
    zoo("list", "--json")
    assert validations["files"] == 1
    monkeypatch.setattr(card_cache, *version)
    zoo("list", "--json")
    assert validations["files"] == 2


def test_a_cache_folder_that_cannot_be_written_changes_nothing(zoo, private_catalogue, validations, monkeypatch, tmp_path):
    expected = zoo("list", "--json").out
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("ZOO_CACHE", str(blocked / "cache"))  # mkdir fails, as on a read-only disk
    for _ in range(2):
        result = zoo("list", "--json")
        assert result.code == 0 and result.err == "" and result.out == expected
    assert validations["files"] == 3  # validated every time, never an error
    loaded = zoo("load", NAME)
    assert loaded.code == 0 and loaded.err == ""


def test_a_toml_date_is_validated_every_time_not_cached(zoo, private_catalogue, validations):
    # JSON has no dates: a card holding one would read back as text. The transformer's
    # typed config refuses a key it does not know, so the card names an architecture
    # without a config model, whose config table is free.
    _edit(private_catalogue, 'architecture = "transformer"', 'architecture = "untyped"', f"[{NAME}]")
    _edit(private_catalogue, "dropout = 0.0", "dropout = 0.0\ntrained_on = 2026-11-30", f"[{NAME}.config]")
    zoo("list", "--json")
    zoo("list", "--json")
    assert validations["files"] == 2 and _entries() == []
    assert type(zoo_core.get_variant(NAME).card.config["trained_on"]).__name__ == "date"


def _fresh(code: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300)
    assert "Traceback" not in done.stderr, done.stderr
    return done


# -- checkpoint headers --------------------------------------------------------------


def _header_entry(checkpoint: Path) -> Path:
    return card_cache._entry_path(checkpoint)


def test_a_header_is_validated_once(zoo, private_catalogue, monkeypatch):
    checkpoint = (private_catalogue.parent / "checkpoints" / f"{NAME}.safetensors").resolve()
    assert zoo("load", NAME).code == 0
    assert _header_entry(checkpoint).is_file()
    from zoo_core.catalogue import cards

    header = json.loads(checkpoints.read_header(checkpoint)["__metadata__"][checkpoints.CARD_KEY])
    validate = cards.ModelCard.model_validate  # loading validates the registry's card, from its cached table

    def refuse(data, *args, **kwargs):
        if data == header:
            raise AssertionError("validated the header again")
        return validate(data, *args, **kwargs)

    monkeypatch.setattr(cards.ModelCard, "model_validate", refuse)
    assert zoo("load", NAME).code == 0


def test_a_registry_card_no_longer_matching_its_header_is_refused_as_before(zoo, private_catalogue):
    checkpoint = (private_catalogue.parent / "checkpoints" / f"{NAME}.safetensors").resolve()
    assert zoo("load", NAME).code == 0  # the header's card is cached now
    _edit(private_catalogue, "learning_rate = 0.001", "learning_rate = 0.002", f"[{NAME}.recipe]")
    expected = (f"zoo: error: {checkpoint}: the card in the header disagrees with the registry at 'recipe.learning_rate': "
                f"file has 0.001, registry has 0.002 (weights made for another card)\n")
    assert zoo("load", NAME).err == expected
    # and the same in a fresh process (both files cached)
    done = _fresh(f"from zoo_core.cli import main\nassert main(['load', '{NAME}']) == 1\n")
    assert done.stderr == expected


def test_a_damaged_header_entry_is_ignored(zoo, private_catalogue):
    checkpoint = (private_catalogue.parent / "checkpoints" / f"{NAME}.safetensors").resolve()
    assert zoo("load", NAME).code == 0
    entry = _header_entry(checkpoint)
    written = entry.read_bytes()
    entry.write_bytes(written.replace(b'"learning_rate":0.001', b'"learning_rate":0.002'))
    assert zoo("load", NAME).code == 0 and entry.read_bytes() == written


def test_with_a_warm_cache_showing_imports_no_pydantic_or_torch(zoo):
    # `zoo show` is part of the front: it reads the cached card as JSON, as listing does.
    assert zoo("show", NAME).code == 0
    done = _fresh("import contextlib, io, sys\nfrom zoo_core.cli import main\n"
                  "with contextlib.redirect_stdout(io.StringIO()):\n"
                  f"    assert main(['show', '{NAME}']) == 0 and main(['show', '{NAME}', '--json']) == 0\n"
                  "print([m for m in ('pydantic', 'torch') if m in sys.modules])\n")
    assert done.stdout == "[]\n"
