"""Names are data, not markup: every string that came from a card, a checkpoint,
a plugin or the command line is shown as the text it is. rich would otherwise
render ``[bold]`` or ``[link=...]`` (or end in a MarkupError on ``[/]``)."""

from __future__ import annotations

import hashlib
import json
import shutil

from safetensors.torch import load_file, save_file

from zoo_core.catalogue.registry import read_registry_file, render_registry

from .conftest import ROOT

MARKUP = "[bold]B[/bold] [link=https://example.com]L[/link] [red]R [/]"
IN_A_FILE_NAME = "[bold]B [red]R"  # no slashes: opening tags only


def _cards():
    return {v.name: v.card for v in read_registry_file(ROOT / "registry.toml", "catalogue")}


def _user_variant(home, card, name, checkpoint_tensors, **update):
    """``card`` renamed into the user catalogue with its own copy of the weights."""
    folder = home / "checkpoints"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.safetensors"
    save_file(checkpoint_tensors, path)
    shutil.copy(ROOT / card.tokenizer.file, folder)
    checkpoint = card.checkpoint.model_copy(
        update={"path": f"checkpoints/{path.name}", "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    )
    tokenizer = card.tokenizer.model_copy(update={"file": f"checkpoints/{(ROOT / card.tokenizer.file).name}"})
    return card.model_copy(update={"name": name, "checkpoint": checkpoint, "tokenizer": tokenizer, **update})


def _no_traceback(result):
    assert "Traceback" not in result.err and "MarkupError" not in result.err, result.err


def test_markup_in_descriptions_component_and_tensor_names_is_shown_as_text(zoo, private_home, tmp_path):
    cards = _cards()
    bigram, nopos = cards["bigram"], cards["transformer-6b-nopos"]
    weights = load_file(ROOT / bigram.checkpoint.path)
    hostile_weights = {**weights, f"extra{MARKUP}": next(iter(weights.values())).clone()}
    registry = private_home / "registry.toml"
    registry.parent.mkdir(parents=True, exist_ok=True)
    registry.write_text(
        render_registry(
            [
                _user_variant(private_home, bigram, "markup-desc", weights, description=f"desc {MARKUP}"),
                _user_variant(private_home, bigram, "markup-tensor", hostile_weights),
                _user_variant(
                    private_home,
                    nopos,
                    "markup-component",
                    load_file(ROOT / nopos.checkpoint.path),
                    config={**nopos.config, "positions": f"none{MARKUP}"},
                ),
            ]
        )
    )
    text = tmp_path / f"text{IN_A_FILE_NAME}.txt"
    text.write_text((ROOT / "data" / "tinyshakespeare.txt").read_text()[:20000])

    listed = zoo("list")
    _no_traceback(listed)
    assert listed.code == 0 and f"none{MARKUP}" in listed.out  # the component's name, as given

    verified = zoo("verify", "markup-*")
    _no_traceback(verified)
    assert verified.code == 1 and f"unexpected extra{MARKUP}" in verified.out  # the tensor's name, as given

    for args in (("search", "desc"), ("list", "--sort", "name"), ("show", "markup-desc")):
        result = zoo(*args)
        _no_traceback(result)
        assert result.code == 0 and "markup-desc" in result.out
    assert MARKUP in zoo("show", "markup-desc").out

    added = zoo("datasets", "add", "marked", str(text), "--description", f"about {MARKUP}")
    assert added.code == 0, added.err
    datasets = zoo("datasets", "list")
    _no_traceback(datasets)
    assert f"text{IN_A_FILE_NAME}.txt" in datasets.out

    in_a_url = MARKUP.replace(" ", "%20")  # a URL has no spaces (`zoo remote add` refuses them)
    assert zoo("remote", "add", "marked", f"file://{tmp_path}/remote{in_a_url}").code == 0
    remotes = zoo("remote", "list")
    _no_traceback(remotes)
    assert f"remote{in_a_url}" in remotes.out

    evaluated = zoo("eval", "markup-desc", "--windows", "2", "--data", "marked")
    _no_traceback(evaluated)
    assert evaluated.code == 0, evaluated.err
    compared = zoo("compare", "markup-desc", "bigram", "--windows", "2", "--max-new-tokens", "2")
    _no_traceback(compared)
    assert compared.code == 0, compared.err

    # errors naming a hostile name are one line with the name as it is
    refused = zoo("load", "markup-component")
    _no_traceback(refused)
    assert refused.code == 1 and f"none{MARKUP}" in refused.err
    assert json.loads(zoo("verify", "markup-tensor", "--json").out)[0]["status"] == "FAILED"


def test_a_progress_bar_shows_a_name_with_markup_as_text():
    import io

    from zoo_core.training.progress import TrainingProgress

    stream = io.StringIO()
    progress = TrainingProgress(f"run{MARKUP}", 2, stream=stream, interactive=True)
    progress.update(1, 0.1, 100, batch_loss=1.0)
    progress.message(f"saved {MARKUP}")
    progress.update(2, 0.2, 200, losses={"train": 1.0, "validation": 1.1}, batch_loss=1.0)
    progress.close()
    shown = stream.getvalue()
    assert f"run{MARKUP}" in shown and f"saved {MARKUP}" in shown


def test_a_plugin_whose_names_hold_markup_is_listed_as_written(zoo):
    import types

    from zoo_core import hookimpl
    from zoo_core.plugin_api.manager import PluginInfo, get_plugins

    def register_positions(register):
        register(f"pos{MARKUP}", lambda **kw: None)

    module = types.SimpleNamespace(register_positions=hookimpl(register_positions))
    module.__name__ = "markup_plugin"
    plugins = get_plugins(reload=True)
    plugins.add_plugin(module, PluginInfo(f"plugin{MARKUP}", f"dist{MARKUP}", "1", False))
    try:
        for args in (("plugins",), ("list",)):
            result = zoo(*args)
            _no_traceback(result)
            assert result.code in (0, 1)
        assert f"pos{MARKUP}" in zoo("plugins").out
    finally:
        get_plugins(reload=True)
