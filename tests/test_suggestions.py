"""Every command the zoo suggests in a message runs: each test provokes the
message, takes the command out of its backticks and runs it."""

from __future__ import annotations

import re
import shlex

from zoo_core.catalogue.registry import read_registry_file, render_registry

from .conftest import ROOT

TINY = "transformer-1b-learned-ctx8"
QUICK = ("--steps", "2", "--quiet", "--set", "eval_windows=2")  # a short run: what is tested is the command


def _suggested(message: str) -> list[str]:
    (command,) = re.findall(r"`(zoo [^`]+)`", message)
    return shlex.split(command)[1:]


def _unpublished(name: str):
    """The tiny variant's card under ``name``, without weights."""
    card = next(v.card for v in read_registry_file(ROOT / "registry.toml", "catalogue") if v.name == TINY)
    checkpoint = card.checkpoint.model_copy(update={"path": f"checkpoints/{name}.safetensors", "sha256": None})
    return card.model_copy(update={"name": name, "checkpoint": checkpoint, "metrics": None})


def test_train_suggestions_for_a_variant_without_weights_run_in_every_layer(zoo, private_catalogue, private_home, tmp_path):
    private_catalogue.write_text(private_catalogue.read_text() + "\n" + render_registry([_unpublished("shipped-bare")]))
    private_home.mkdir(parents=True)
    (private_home / "checkpoints").mkdir()
    (private_home / "checkpoints" / "bpe-1024.tiktoken").write_bytes((ROOT / "checkpoints" / "bpe-1024.tiktoken").read_bytes())
    (private_home / "registry.toml").write_text(render_registry([_unpublished("mine-bare")]))
    extra = tmp_path / "extra" / "registry.toml"
    (extra.parent / "checkpoints").mkdir(parents=True)
    (extra.parent / "checkpoints" / "bpe-1024.tiktoken").write_bytes((ROOT / "checkpoints" / "bpe-1024.tiktoken").read_bytes())
    extra.write_text(render_registry([_unpublished("extra-bare")]))

    for name, loads, registry in (
        ("shipped-bare", "my-shipped-bare", ()),  # a shipped card: trained into your catalogue under a new name
        ("mine-bare", "mine-bare", ()),
        ("extra-bare", "extra-bare", ("--registry", str(extra))),
    ):
        refused = zoo(*registry, "load", name)
        assert refused.code == 1 and "no published weights yet" in refused.err, refused.err
        command = _suggested(refused.err)
        assert command[:2] == ["train", name]
        trained = zoo(*command, *QUICK)
        assert trained.code == 0, (command, trained.err)
        assert zoo(*registry, "load", loads).code == 0


def test_remote_suggestions_run(zoo, tmp_path):
    folder = tmp_path / "shared"
    published = zoo("remote", "publish", str(folder), TINY)
    assert published.code == 0, published.err
    command = _suggested(published.out)
    assert command[:3] == ["remote", "add", "NAME"]
    added = zoo("remote", "add", "team", folder.as_uri())
    assert added.code == 0
    command = _suggested(added.out)
    assert command[:2] == ["list", "--remote"] and zoo(*command).code == 0
    again = zoo("remote", "add", "team", folder.as_uri())
    assert again.code == 1
    command = _suggested(again.err)
    assert command == ["remote", "remove", "team"] and zoo(*command).code == 0
    assert zoo("remote", "add", "team", folder.as_uri()).code == 0


def _suggested_word(message: str) -> str:
    (word,) = re.findall(r"did you mean '([^']+)'\?", message)
    return word


def test_a_mistyped_option_suggests_the_one_that_runs(zoo):
    typed = ["sample", "gpt-char-mini", "--promt", "ROMEO:", "--max-new-tokens", "2"]
    refused = zoo(*typed)
    assert refused.code == 2 and refused.err.count("\n") == 1
    meant = _suggested_word(refused.err)
    assert meant == "--prompt"
    fixed = zoo(*(meant if word == "--promt" else word for word in typed))
    assert fixed.code == 0 and fixed.out.startswith("ROMEO:")


def test_a_mistyped_recipe_field_names_the_close_one_and_lists_nothing_else(zoo, tmp_path):
    run = ("--steps", "1", "--quiet", "--out", str(tmp_path / "run"))
    refused = zoo("train", TINY, *run, "--set", "learning_rat=0.002")
    assert refused.code == 1 and refused.err.count("\n") == 1
    assert refused.err.startswith("zoo: error: --set learning_rat: a recipe has no field 'learning_rat'; did you mean 'learning_rate'")
    assert "batch_size" not in refused.err  # not the recipe's thirty fields
    assert zoo("train", TINY, *run, "--set", "learning_rate=0.002", "--set", "eval_windows=2").code == 0

    nothing_close = zoo("train", TINY, *run, "--set", "xyzzy=1")
    assert nothing_close.code == 1 and "a recipe has no field 'xyzzy'" in nothing_close.err
    listing = zoo(*_suggested(nothing_close.err))
    assert listing.code == 0 and '"learning_rate"' in listing.out  # `zoo card-schema`: the fields


def test_a_mistyped_trainer_setting_names_the_close_one(zoo, tmp_path):
    refused = zoo("train", "tiny-lora", "--from", TINY, "--trainer", "lora", "--out", str(tmp_path / "run"),
                  "--steps", "1", "--quiet", "--set", "options.rnk=2")
    assert refused.code == 1
    assert "recipe.options.rnk: lora has no such setting; did you mean 'rank'?" in refused.err
