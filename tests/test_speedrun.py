"""gpt-char-speedrun: the catalogue's time-to-quality recipe trains, publishes and samples
through the ordinary commands; its figures against nanoGPT are measured in benchmarks/."""

from __future__ import annotations

import json
import re
import shlex
import tomllib

import zoo_core

from .conftest import ROOT

NAME = "gpt-char-speedrun"


def test_the_recipe_is_built_from_registered_ingredients():
    card = zoo_core.get_variant(NAME).card
    assert (card.recipe.optimizer, card.recipe.lr_schedule) == ("muon", "wsd")
    assert card.config["mlp"] == "relu2" and card.config["qk_norm"] is True
    network = zoo_core.build_network(zoo_core.get_variant(NAME))
    assert all(block.attention.qk_norm for block in network.blocks)


def test_a_short_run_of_the_recipe_trains_publishes_and_samples(zoo, tmp_path):
    out = tmp_path / "run"
    trained = zoo("train", NAME, "--steps", "6", "--name", "my-speedrun", "--out", str(out), "--quiet")
    assert trained.code == 0, trained.err
    entry = tomllib.loads((out / "registry.toml").read_text())["my-speedrun"]
    assert entry["recipe"]["optimizer"] == "muon" and entry["recipe"]["steps"] == 6
    assert entry["config"]["qk_norm"] is True
    sampled = zoo("--registry", str(out / "registry.toml"), "sample", "my-speedrun", "--prompt", "ROMEO:", "--max-new-tokens", "20", "--seed", "1", "--json")
    assert sampled.code == 0, sampled.err
    [sample] = json.loads(sampled.out)["samples"]
    assert sample["prompt"] == "ROMEO:" and len(sample["tokens"]) == 20


def test_the_commands_of_docs_speedrun_md_run(zoo, tmp_path, monkeypatch):
    # As written, with a few steps instead of the recipe's (the full runs are benchmarks/).
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "docs" / "speedrun.md").read_text(encoding="utf-8"), re.S)
    commands = [shlex.split(line) for block in blocks for line in block.splitlines() if line.strip()]
    assert [c[:2] for c in commands] == [["zoo", "train"], ["zoo", "train"]]
    for command in commands:
        done = zoo(*command[1:], "--steps", "4", "--quiet")
        assert done.code == 0, (command, done.err)
    entry = tomllib.loads((tmp_path / "runs" / "mini-muon" / "registry.toml").read_text())["mini-muon"]
    assert (entry["recipe"]["optimizer"], entry["recipe"]["lr_schedule"]) == ("muon", "wsd")
    assert (tmp_path / "runs" / "speedrun" / "registry.toml").is_file()
