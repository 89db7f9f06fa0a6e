"""LoRA adapters: trained on a frozen base, written as a small file, applied when their variant loads.

Every run fine-tunes gpt-char-mini for a few steps on a short text this file
writes, on one thread (the same sums in the same order, so an interrupted and
resumed run can be compared bit for bit with an uninterrupted one).
"""

from __future__ import annotations

import contextlib
import signal
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import pytest
import torch
from safetensors.torch import load_file
from torch.optim.optimizer import register_optimizer_step_post_hook

import zoo_core
from zoo_core.catalogue.registry import read_registry_file, render_registry
from zoo_core.corpus.batches import Corpus
from zoo_core.errors import ZooError
from zoo_core.loading.api import load_many
from zoo_core.storage.checkpoints import header_card
from zoo_core.storage.locations import user_registry_path
from zoo_core.training.job import TrainingJob
from zoo_core.training.loop import TrainingInterrupted
from zoo_core.training.run import train_variant
from zoo_plugins.lora.layers import DEFAULT_TARGETS, LoRALinear, LoRASettings, attach
from zoo_plugins.lora.trainer import LoRATrainer

BASE = "gpt-char-mini"
NAME = "song-lora"
STEPS = 4
WORDS = "the adapter learns a little song of rivers and stones while every weight beneath it sleeps".split()
# About 7,000 characters of gpt-char-mini's alphabet: enough for its 64-token windows in both splits.
SONG = "".join(
    f"{'ROMEO' if line % 2 else 'JULIET'}: {' '.join(WORDS[(line + k) % len(WORDS)] for k in range(7))}.\n"
    for line in range(150)
)


@contextlib.contextmanager
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def lora_job(out: Path, text: Path, **changes) -> TrainingJob:
    """`zoo train song-lora --from gpt-char-mini --trainer lora --data TEXT --steps 4 --set ...`, written to ``out``."""
    overrides = {"kind": "lora", "eval_windows": 16, "learning_rate": 1e-2, "lr_schedule": "constant", "options.rank": 4}
    return TrainingJob(
        variant=BASE,
        new_name=NAME,
        from_weights=True,
        data=text,
        steps=STEPS,
        recipe_overrides=overrides,
        out=out,
        quiet=True,
        **changes,
    )


class Run(NamedTuple):
    card: object
    registry: Path
    text: Path


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory) -> Run:
    """One LoRA run, shared by the tests that read what it wrote (``--out``: a registry of its own)."""
    folder = tmp_path_factory.mktemp("lora")
    text = folder / "song.txt"
    text.write_text(SONG, encoding="utf-8")
    with pytest.MonkeyPatch.context() as patch, one_thread():
        patch.setenv("ZOO_HOME", str(folder / "home"))
        patch.setenv("ZOO_CACHE", str(folder / "cache"))
        patch.delenv("ZOO_REGISTRY", raising=False)
        card, registry = train_variant(lora_job(folder / "run", text))
    return Run(card, registry, text)


@pytest.fixture
def song(tmp_path) -> Path:
    path = tmp_path / "song.txt"
    path.write_text(SONG, encoding="utf-8")
    return path


def _logits(model, text: str = "ROMEO: the adapter learns") -> torch.Tensor:
    ids = torch.tensor([model.tokenizer.encode(text)])
    with torch.no_grad():
        return model.network(ids)[0]


def test_a_fresh_adapter_computes_exactly_the_base_and_leaves_it_frozen():
    model = zoo_core.load(BASE)
    before = _logits(model)
    layers = attach(model.network, LoRASettings(), "test")
    assert sorted({name.rsplit(".", 1)[1] for name in layers}) == ["proj", "qkv"] and len(layers) == 8
    assert torch.equal(_logits(model), before)  # B is zero: step 0 is the base
    trainable = sum(p.numel() for p in model.network.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.network.parameters())
    assert trainable == sum(layer.lora_A.numel() + layer.lora_B.numel() for layer in layers.values())
    assert trainable < 0.05 * total


def test_training_gives_gradients_and_optimizer_state_to_the_adapters_alone():
    class Recording(LoRATrainer):  # the lora trainer, keeping a hand on the optimizer it makes
        def make_optimizer(self, model, recipe):
            self.optimizer = super().make_optimizer(model, recipe)
            return self.optimizer

    model = zoo_core.load(BASE)
    base_weights = {name: t.clone() for name, t in model.network.state_dict().items()}
    recipe = model.card.recipe.model_copy(
        update={"kind": "lora", "steps": 2, "eval_windows": 16, "lr_schedule": "constant", "learning_rate": 1e-2}
    )
    corpus = Corpus.from_text(SONG, model.tokenizer, recipe.train_fraction)
    trainer = Recording()
    with one_thread():
        trainer.run(model.network, TrainingJob(recipe=recipe, corpus=corpus, context_length=model.card.context_length))
    parameters = dict(model.network.named_parameters())
    with_gradients = {name for name, p in parameters.items() if p.grad is not None}
    adapters = {name for name in parameters if name.endswith((".lora_A", ".lora_B"))}
    assert with_gradients == adapters and len(adapters) == 16
    assert sum(parameters[n].numel() for n in with_gradients) < 0.5 * sum(p.numel() for p in parameters.values())
    assert {id(p) for p in trainer.optimizer.state} == {id(parameters[n]) for n in adapters}
    assert all(not parameters[name].requires_grad for name in base_weights)
    state = model.network.state_dict()
    assert all(torch.equal(state[name], weight) for name, weight in base_weights.items())  # the base is untouched
    assert all(state[f"{name}.lora_B"].abs().max() > 0 for name in {a.rsplit(".", 1)[0] for a in adapters})


def test_the_run_writes_a_small_adapter_file_and_a_card_naming_its_base(lora_run):
    card = lora_run.card
    path = lora_run.registry.parent / card.checkpoint.path
    base = zoo_core.get_variant(BASE)
    assert path.stat().st_size < 0.1 * base.checkpoint_path.stat().st_size
    tensors = load_file(path)
    assert len(tensors) == 16 and all(name.endswith((".lora_A", ".lora_B")) for name in tensors)
    assert card.parameters == sum(t.numel() for t in tensors.values())
    assert card.adapter.kind == "lora" and card.adapter.base == BASE
    assert card.adapter.base_sha256 == base.card.checkpoint.sha256 == card.recipe.base_sha256
    assert card.adapter.config == {"rank": 4, "alpha": 4.0, "targets": list(DEFAULT_TARGETS)}
    assert card.recipe.kind == "lora"
    assert card.recipe.options == {"rank": 4, "alpha": 4.0, "targets": list(DEFAULT_TARGETS), "dropout": 0.0}
    assert "adapter" in card.tags
    assert header_card(path)["adapter"]["base_sha256"] == card.adapter.base_sha256


def test_loading_applies_the_adapter_on_the_fly_or_merged_with_the_same_logits(lora_run, monkeypatch):
    monkeypatch.setenv("ZOO_REGISTRY", str(lora_run.registry))
    on_the_fly = zoo_core.load(NAME)
    merged = zoo_core.load(NAME, merge_adapter=True)
    base = zoo_core.load(BASE)
    assert (_logits(on_the_fly) - _logits(merged)).abs().max() < 1e-5
    assert (_logits(on_the_fly) - _logits(base)).abs().max() > 1e-3
    assert any(isinstance(m, LoRALinear) for m in on_the_fly.network.modules())
    assert not any(isinstance(m, LoRALinear) for m in merged.network.modules())
    assert merged.parameters() == base.parameters() == on_the_fly.parameters() - lora_run.card.parameters
    assert f"base '{BASE}' (sha256" in ", ".join(on_the_fly.verification.checks)
    # Cached decoding calls each layer's forward on (B, C) rows: the adapted layers' too.
    with one_thread():
        cached = on_the_fly.generate("ROMEO:", max_new_tokens=24, seed=1)
        assert cached == on_the_fly.generate("ROMEO:", max_new_tokens=24, seed=1, use_cache=False)


def test_zoo_load_sample_verify_and_list_take_an_adapter_variant(zoo, lora_run):
    registry = str(lora_run.registry)
    loaded = zoo("--registry", registry, "load", NAME, "--merge")
    assert loaded.code == 0 and "base 'gpt-char-mini'" in loaded.out, loaded.err
    sampled = zoo("--registry", registry, "sample", NAME, "--prompt", "JULIET:", "--max-new-tokens", "10")
    assert sampled.code == 0 and "JULIET:" in sampled.out, sampled.err
    verified = zoo("--registry", registry, "verify", NAME)
    assert verified.code == 0 and " ok " in verified.out and "base 'gpt-char-mini'" in verified.out, verified.out
    listed = zoo("--registry", registry, "list", NAME)
    assert "gpt + lora" in listed.out


def _one_line_error(result, *fragments):
    assert result.code == 1, result.out
    assert result.err.startswith("zoo: error: ") and result.err.count("\n") == 1, result.err
    for fragment in fragments:
        assert fragment in result.err, result.err


def test_a_changed_or_missing_base_is_refused_in_one_line(zoo, song):
    quick = ("--data", str(song), "--steps", "1", "--set", "eval_windows=16", "--quiet")
    assert zoo("train", "song-base", "--from", BASE, *quick).code == 0
    assert zoo("train", "song-adapter", "--from", "song-base", "--trainer", "lora", *quick).code == 0
    trained_on = zoo_core.get_variant("song-base").card.checkpoint.sha256
    assert zoo("load", "song-adapter").code == 0
    # The base is retrained where it is declared: same name, new weights, new sha256 in its card.
    assert zoo("train", "song-base", "--publish", *quick).code == 0
    now = zoo_core.get_variant("song-base").card.checkpoint.sha256
    assert now != trained_on
    _one_line_error(
        zoo("load", "song-adapter"),
        f"adapter 'song-adapter': base 'song-base' checkpoint sha256 {now[:16]}… is not the {trained_on[:16]}… "
        "the adapter was trained on",
    )
    _one_line_error(zoo("remove", "song-base"), "variant 'song-base' is the base of the adapter 'song-adapter'")
    # The base gone all the same, as an older zoo's `zoo remove` or a hand edit of the registry leaves it:
    registry = user_registry_path()
    kept = [v.card for v in read_registry_file(registry, "user", layer="user") if v.name != "song-base"]
    registry.write_text(render_registry(kept, ""), encoding="utf-8")
    missing = "adapter 'song-adapter' needs base 'song-base', which is not in the catalogue"
    _one_line_error(zoo("sample", "song-adapter", "--prompt", "ROMEO:"), missing)
    with pytest.raises(ZooError, match=missing):
        zoo_core.load("song-adapter")
    assert zoo("verify", "song-adapter").code == 1


@pytest.mark.parametrize(
    "settings, message",
    [
        (["--trainer", "lora", "--set", "options.ranks=4"], "recipe.options.ranks: lora has no such setting"),
        (["--trainer", "lora", "--set", "options.rank=0"], "recipe.options.rank must be a whole number of at least 1"),
        (["--trainer", "lora", "--set", "options.dropout=1.5"], "recipe.options.dropout must be at least 0 and below 1"),
        (
            ["--trainer", "lora", "--set", 'options.targets=["*.mlp"]'],
            "recipe.options.targets: '*.mlp' matches no Linear layer of the network",
        ),
        (["--set", "options.rank=4"], "recipe.options: the 'trained' trainer takes no options (given: rank)"),
    ],
)
def test_bad_settings_are_refused_in_one_line_before_anything_is_written(zoo, song, tmp_path, settings, message):
    out = tmp_path / "out"
    result = zoo("train", "bad", "--from", BASE, "--data", str(song), "--steps", "1", "--out", str(out), *settings)
    _one_line_error(result, message)
    assert not out.exists()


def test_lora_needs_weights_to_adapt(zoo, song, tmp_path, lora_run):
    fresh = zoo("train", BASE, "--trainer", "lora", "--data", str(song), "--out", str(tmp_path / "a"))
    _one_line_error(fresh, f"zoo train NEW --from {BASE} --trainer lora")
    registry = str(lora_run.registry)
    on_adapter = zoo("--registry", registry, "train", "again", "--from", NAME, "--trainer", "lora", "--out", str(tmp_path / "b"))
    _one_line_error(on_adapter, f"--from {NAME}: is an adapter on '{BASE}'")


def test_an_interrupted_lora_run_resumes_to_the_uninterrupted_adapter(lora_run, tmp_path):
    job = lora_job(tmp_path / "run", lora_run.text)
    updates = []

    def ctrl_c_during_the_second_update(optimizer, args, kwargs):
        updates.append(len(optimizer.state))
        if len(updates) == 2:
            signal.raise_signal(signal.SIGINT)  # as Ctrl-C: the step completes, its state is saved

    hook = register_optimizer_step_post_hook(ctrl_c_during_the_second_update)
    try:
        with one_thread(), pytest.raises(TrainingInterrupted):
            train_variant(job)
    finally:
        hook.remove()
    assert updates == [16, 16]  # optimizer state for the 16 adapter tensors, none for the base
    state = load_file(tmp_path / "run" / f"{NAME}.state.safetensors")
    assert {int(name.split(".")[1]) for name in state if name.startswith("optimizer.")} == set(range(16))
    with one_thread():
        card, registry = train_variant(replace(job, resume=True))
    resumed = load_file(registry.parent / card.checkpoint.path)
    whole = load_file(lora_run.registry.parent / lora_run.card.checkpoint.path)
    assert resumed.keys() == whole.keys() and all(torch.equal(resumed[n], whole[n]) for n in whole)


def _bytes_held(*models) -> int:
    """What the models' weights occupy, a storage two of them share counted once."""
    storages = {}
    for model in models:
        for tensor in model.network.state_dict().values():
            storage = tensor.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def test_a_server_and_compare_hold_the_base_once_beside_its_adapters(lora_run, monkeypatch):
    from zoo_core.evaluation.compare import compare_variants
    from zoo_core.web.generation import ModelCache

    monkeypatch.setenv("ZOO_REGISTRY", str(lora_run.registry))
    cache = ModelCache()
    base, adapted = cache.get(BASE), cache.get(NAME)
    alone = _bytes_held(zoo_core.load(BASE))
    adapter_bytes = 4 * lora_run.card.parameters
    # The server's two models: the base's weights once, and the adapter's own.
    assert _bytes_held(base, adapted) <= alone + adapter_bytes
    assert "weights shared with the loaded base" in ", ".join(adapted.verification.checks)
    # Sharing changes nothing the adapter computes: the same logits as loaded alone.
    assert torch.equal(_logits(adapted), _logits(zoo_core.load(NAME)))
    assert not torch.equal(_logits(adapted), _logits(base)) and torch.equal(_logits(base), _logits(zoo_core.load(BASE)))
    # An adapter asked for first brings its base into the cache, which serving the base then reuses.
    fresh = ModelCache()
    fresh.get(NAME)
    assert fresh.loaded() == sorted([BASE, NAME])
    # zoo compare loads the base before its adapter, which shares it, and compares as before.
    loaded = []
    real = load_many

    def watched(*args, **options):
        loaded.extend(real(*args, **options))
        return loaded

    monkeypatch.setattr("zoo_core.evaluation.compare.load_many", watched)
    compared = compare_variants([NAME, BASE], windows=2, max_new_tokens=2, data=lora_run.text)
    assert [m.name for m in loaded] == [NAME, BASE] and _bytes_held(*loaded) <= alone + adapter_bytes
    adapter_row, base_row = compared["models"]
    assert (adapter_row["name"], base_row["name"]) == (NAME, BASE)
    assert adapter_row["validation_loss"] != base_row["validation_loss"]  # the adapter still applies


def test_the_free_space_a_lora_run_needs_counts_the_moments_of_its_adapters_alone(zoo, song, tmp_path, monkeypatch):
    """A training state holds the weights, the best weights and the optimizer's two
    moments of what trains: for LoRA the adapters, not the frozen base (a Gemma 3 LoRA
    was refused on 11 GiB free for 13 GiB of states it would never write)."""
    import collections
    import re

    import zoo_core.training.destination

    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(zoo_core.training.destination.shutil, "disk_usage", lambda _: usage(10**9, 10**9, 1000))
    base = zoo_core.load(BASE).network
    weights = sum(t.numel() * t.element_size() for t in base.state_dict().values())
    quick = ("--data", str(song), "--steps", "2", "--quiet", "--out", str(tmp_path / "run"))

    def states(*args) -> float:
        result = zoo("train", *args, *quick)
        assert result.code == 1 and "nothing was trained" in result.err, result.err
        return float(re.search(r"training states ([\d.]+) MiB", result.err).group(1)) * 2**20

    full, adapters = states(BASE), states("song-adapter", "--from", BASE, "--trainer", "lora")
    assert full == pytest.approx(8 * weights, rel=0.01)  # two states of weights, best weights, two moments
    assert 4 * weights < adapters < 4.5 * weights  # the moments of the adapters only
