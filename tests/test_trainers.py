"""Trainers are plugins: the recipe's `kind` names a registered trainer.

The puzzle's hand-set weights come from the trainer `hand-built` (registered by
the puzzle plugin) through the same `zoo train` path as every trained variant,
and reproduce the shipped checkpoint byte for byte.
"""

from __future__ import annotations

import tomllib

import pytest

import zoo_core
from zoo_core.plugin_api.manager import PluginInfo, PluginSet, get_plugins
from zoo_core.storage.checkpoints import sha256_file
from zoo_core.training.loop import StandardTrainer

from .conftest import ROOT


def _shipped(name: str) -> dict:
    return tomllib.loads((ROOT / "registry.toml").read_text(encoding="utf-8"))[name]


def test_the_built_in_trainers_are_registered_by_plugins():
    trainers = get_plugins().components["trainers"]
    assert trainers.plugin_of("trained") == "trainers"
    assert trainers.plugin_of("hand-built") == "puzzle"
    assert isinstance(trainers.create("trained"), StandardTrainer)


@pytest.mark.parametrize("name", ["puzzle-disobeys", "puzzle-disobeys-nopos"])
def test_publishing_the_puzzle_rebuilds_the_shipped_file_byte_for_byte(zoo, private_catalogue, name):
    checkpoint = private_catalogue.parent / "checkpoints" / f"{name}.safetensors"
    checkpoint.unlink()
    # Publishing into the catalogue that declares the variant is what --registry says.
    done = zoo("train", name, "--publish", "--registry", str(private_catalogue), "--quiet")
    assert done.code == 0, done.err
    shipped = _shipped(name)["checkpoint"]["sha256"]
    assert sha256_file(checkpoint) == shipped
    assert f"sha256 {shipped}" in done.out
    # The card it wrote is the shipped card, table for table, and now also says
    # which plugins built it (a descriptive table, not in the checkpoint's header).
    written = tomllib.loads(private_catalogue.read_text(encoding="utf-8"))[name]
    assert written.pop("components")["trainer"] == {"name": "hand-built", "plugin": "puzzle",
                                                     "distribution": "zoo-lm", "version": zoo_core.__version__}
    assert written == _shipped(name)
    assert not checkpoint.with_suffix(".history.json").exists()  # nothing to record for hand-set weights


def test_hand_set_weights_take_no_training_options(zoo, private_catalogue):
    done = zoo("train", "puzzle-disobeys", "--steps", "3")
    assert done.code == 1
    assert done.err == "zoo: error: variant 'puzzle-disobeys' is hand-built: its trainer reads no text and takes no --steps\n"


def test_a_recipe_naming_an_unknown_trainer_is_one_line(zoo, private_catalogue):
    text = private_catalogue.read_text(encoding="utf-8")
    marker = "[transformer-1b-learned-ctx8.recipe]\n"
    assert marker + 'kind = "trained"\n' in text
    private_catalogue.write_text(text.replace(marker + 'kind = "trained"\n', marker + 'kind = "muon"\n'), encoding="utf-8")
    get_plugins(reload=True)
    done = zoo("train", "transformer-1b-learned-ctx8", "--steps", "2", "--quiet")
    assert done.code == 1
    assert done.err.startswith("zoo: error: no trainer named 'muon' is registered (known: hand-built, lora, trained")
    assert done.err.count("\n") == 1


def test_a_trainer_returning_the_wrong_object_is_one_line_naming_plugin_and_what_is_missing():
    plugins = PluginSet()

    class Plugin:
        @staticmethod
        def register_trainers(register):
            register("sloppy", lambda: object())

    from zoo_core import hookimpl

    hookimpl(Plugin.register_trainers)
    plugins.add_plugin(Plugin, PluginInfo("sloppy-plugin", "x", "1", False))
    with pytest.raises(Exception) as error:
        plugins.components["trainers"].create("sloppy")
    assert str(error.value) == (
        "plugin 'sloppy-plugin': trainer 'sloppy': the factory returned a object, "
        "which lacks run(), uses_corpus (zoo_core.plugin_api.protocols.Trainer)"
    )
