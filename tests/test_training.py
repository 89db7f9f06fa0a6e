"""Training: one seed fixes batches, weights and losses; `zoo train` writes a loadable variant."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

import zoo_core
from zoo_core.catalogue.cards import Recipe
from zoo_core.corpus.batches import BatchSampler, Corpus, fixed_windows
from zoo_core.corpus.datasets import read_text_file
from zoo_core.plugin_api.manager import get_plugins
from zoo_core.training.job import TrainingJob
from zoo_core.training.loop import StandardTrainer, seeded_network
from zoo_core.training.step import learning_rate_at

from .conftest import ROOT


@pytest.fixture(scope="module")
def corpus():
    tokenizer = zoo_core.load_tokenizer(zoo_core.get_variant("bigram"))
    return Corpus.from_text(read_text_file(ROOT / "data" / "tinyshakespeare.txt").text, tokenizer, 0.9)


def test_split_is_train_first(corpus):
    assert len(corpus.train) > 8 * len(corpus.validation)


def test_batches_repeat_with_the_seed(corpus):
    a, b, c = (BatchSampler(corpus.train, 8, 4, seed) for seed in (1, 1, 2))
    first = [a.next() for _ in range(3)]
    second = [b.next() for _ in range(3)]
    assert all(torch.equal(x1, x2) and torch.equal(y1, y2) for (x1, y1), (x2, y2) in zip(first, second))
    assert not torch.equal(first[0][0], c.next()[0])
    x, y = first[0]
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one


def test_evaluation_windows_are_fixed(corpus):
    assert torch.equal(fixed_windows(corpus.validation, 8, 5)[0], fixed_windows(corpus.validation, 8, 5)[0])


def _train(corpus, seed):
    variant = zoo_core.get_variant("transformer-1b-learned-ctx8")
    recipe = Recipe(steps=30, eval_every=10, eval_windows=16, seed=seed, weight_decay=0.01)
    network = seeded_network(lambda: zoo_core.build_network(variant), seed)
    result = StandardTrainer().run(network, TrainingJob(recipe=recipe, corpus=corpus, context_length=8))
    return network, result


def test_same_seed_same_weights_and_losses(corpus):
    (a, ra), (b, rb), (_, rc) = _train(corpus, 5), _train(corpus, 5), _train(corpus, 6)
    assert ra.history == rb.history
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))
    assert ra.history != rc.history
    assert [h["step"] for h in ra.history] == [1, 10, 20, 30]
    assert ra.history[-1]["train"] < ra.history[0]["train"]  # it learns


def test_cosine_schedule_warms_up_and_decays():
    recipe = Recipe(learning_rate=1e-3, lr_schedule="cosine", warmup_steps=10, min_learning_rate=1e-4, steps=100)
    assert learning_rate_at(5, recipe, 100) == pytest.approx(5e-4)
    assert learning_rate_at(10, recipe, 100) == pytest.approx(1e-3)
    assert learning_rate_at(100, recipe, 100) == pytest.approx(1e-4)
    assert learning_rate_at(55, recipe, 100) == pytest.approx(5.5e-4)


def test_zoo_train_writes_a_loadable_variant(zoo, tmp_path, monkeypatch):
    out = tmp_path / "run"
    result = zoo("train", "transformer-1b-learned-ctx8", "--steps", "40", "--out", str(out), "--quiet")
    assert result.code == 0, result.err
    registry = out / "registry.toml"
    assert (out / "transformer-1b-learned-ctx8.safetensors").exists() and (out / "bpe-1024.tiktoken").exists()
    history = json.loads((out / "transformer-1b-learned-ctx8.history.json").read_text())
    assert history["history"][-1]["step"] == 40
    monkeypatch.setenv("ZOO_BUILTIN_REGISTRY", str(registry))
    get_plugins(reload=True)
    try:
        model = zoo_core.load("transformer-1b-learned-ctx8")
        assert model.card.recipe.steps == 40
        assert model.card.metrics.validation_loss == pytest.approx(history["history"][-1]["validation"], abs=1e-4)
        shipped = load_file(str(ROOT / "checkpoints" / "transformer-1b-learned-ctx8.safetensors"))
        assert not torch.equal(shipped["lm_head.weight"], model.network.lm_head.weight)
    finally:
        monkeypatch.delenv("ZOO_BUILTIN_REGISTRY")
        get_plugins(reload=True)


def test_train_refuses_a_missing_corpus(zoo, tmp_path):
    result = zoo("train", "bigram", "--steps", "5", "--data", str(tmp_path / "none.txt"), "--out", str(tmp_path / "o"))
    assert result.code == 1 and "corpus not found" in result.err
    assert not (tmp_path / "o").exists()


def test_train_on_another_text(zoo, tmp_path):
    text = tmp_path / "poem.txt"
    text.write_text("Shall I compare thee to a summer's day?\nThou art more lovely and more temperate.\n" * 40)
    result = zoo("train", "bigram", "--steps", "20", "--data", str(text), "--out", str(tmp_path / "o"), "--quiet")
    assert result.code == 0, result.err
    assert str(text) in (tmp_path / "o" / "registry.toml").read_text()
