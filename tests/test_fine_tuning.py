"""Fine-tuning a variant on one's own text, recipe overrides, gradient accumulation, keeping the best."""

from __future__ import annotations

import json
import random

import pytest
import torch

import zoo_core
from zoo_core.catalogue.cards import Recipe
from zoo_core.corpus.batches import Corpus
from zoo_core.corpus.datasets import read_text_file
from zoo_core.training.job import TrainingJob
from zoo_core.training.loop import StandardTrainer, seeded_network

from .conftest import ROOT

BASE = "gpt-char-mini"  # character vocabulary of Tiny Shakespeare, context 64, no dropout


def own_text(seed: int = 3, lines: int = 500) -> str:
    """Text unlike Shakespeare in the base's own characters: a newly trained
    model should find it easier than the base does."""
    words = "the cat sat on a mat and then the dog ran to the park where birds sang songs of summer".split()
    rng = random.Random(seed)
    return "\n".join(" ".join(rng.choice(words) for _ in range(12)).capitalize() + "." for _ in range(lines)) + "\n"


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "mine.txt"
    path.write_text(own_text(), encoding="utf-8")
    return path


def _validation_loss(zoo, name: str, data) -> float:
    result = zoo("eval", name, "--data", str(data), "--windows", "64", "--json")
    assert result.code == 0, result.err
    return json.loads(result.out)["validation_loss"]


def test_fine_tuning_lowers_the_loss_on_ones_own_text_and_records_its_lineage(zoo, text_file, private_home):
    added = zoo("datasets", "add", "cats", str(text_file), "--description", "cats and dogs")
    assert added.code == 0, added.err
    result = zoo("train", "my-cats", "--from", BASE, "--data", "cats", "--steps", "40",
                 "--learning-rate", "3e-3", "--set", "warmup_steps=0", "--set", "eval_windows=64", "--quiet")
    assert result.code == 0, result.err
    assert "my-cats" in result.out and str(private_home / "registry.toml") in result.out

    card = zoo_core.get_variant("my-cats").card  # published in the user catalogue by default
    base = zoo_core.get_variant(BASE).card
    assert card.recipe.base == BASE and card.recipe.base_sha256 == base.checkpoint.sha256
    assert card.recipe.data == "cats" and card.recipe.data_sha256 == read_text_file(text_file).sha256
    assert card.recipe.learning_rate == 3e-3 and card.recipe.warmup_steps == 0 and card.recipe.steps == 40
    assert card.architecture == base.architecture and card.config == base.config
    assert card.tokenizer.sha256 == base.tokenizer.sha256
    assert "fine-tuned" in card.tags and BASE in card.description

    assert _validation_loss(zoo, "my-cats", "cats") < _validation_loss(zoo, BASE, "cats") - 0.5
    sampled = zoo("sample", "my-cats", "--prompt", "The ", "--max-new-tokens", "20", "--seed", "1")
    assert sampled.code == 0, sampled.err

    # The recorded text changed by one byte: training, and scoring on it, are refused.
    raw = bytearray(text_file.read_bytes())
    raw[10] = ord("X") if raw[10] != ord("X") else ord("Y")
    text_file.write_bytes(bytes(raw))
    for refused in (
        zoo("eval", "my-cats", "--windows", "8"),
        zoo("train", "my-cats-2", "--from", BASE, "--data", "cats", "--steps", "1", "--quiet"),
    ):
        assert refused.code != 0 and "sha256" in refused.err and len(refused.err.strip().splitlines()) == 1


def test_fine_tuning_needs_a_new_name_and_published_weights(zoo, text_file):
    same = zoo("train", BASE, "--from", BASE, "--data", str(text_file), "--steps", "1", "--quiet")
    assert same.code != 0 and "name of its own" in same.err
    puzzle = zoo("train", "my-puzzle", "--from", "puzzle-hand-built", "--steps", "1", "--quiet")
    assert puzzle.code != 0 and len(puzzle.err.strip().splitlines()) == 1


def test_characters_outside_the_vocabulary_are_named_or_dropped_and_counted(zoo, tmp_path):
    path = tmp_path / "accents.txt"
    path.write_text(own_text() + "Café, naïve café.\n", encoding="utf-8")
    refused = zoo("train", "my-accents", "--from", BASE, "--data", str(path), "--steps", "2", "--quiet")
    assert refused.code != 0
    assert "'é' ×2" in refused.err and "'ï' ×1" in refused.err and "--skip-unknown" in refused.err
    assert len(refused.err.strip().splitlines()) == 1

    dropped = zoo("train", "my-accents", "--from", BASE, "--data", str(path), "--steps", "2",
                  "--set", "eval_windows=16", "--skip-unknown", "--log-every", "100")
    assert dropped.code == 0, dropped.err
    assert "dropped 3 occurrences of 2 character(s)" in dropped.err
    assert zoo_core.get_variant("my-accents").card.recipe.skip_unknown is True
    assert zoo("eval", "my-accents", "--windows", "8").code == 0  # scored without them, as trained
    # Compared with its base on the same text, the same way: both see it without them.
    compared = zoo("compare", BASE, "my-accents", "--data", str(path), "--windows", "8", "--max-new-tokens", "4")
    assert compared.code == 0, compared.err


@pytest.mark.parametrize(
    "setting, message",
    [
        ("batch_size=0", "batch_size"),
        ("learning_rat=1", "learning_rat"),
        ("lr_schedule=linear", "lr_schedule"),
        ("data=other", "--set data"),
        ("no-equals", "KEY=VALUE"),
    ],
)
def test_a_bad_recipe_override_is_one_line(zoo, text_file, setting, message):
    result = zoo("train", "x", "--from", BASE, "--data", str(text_file), "--set", setting, "--quiet")
    assert result.code != 0 and message in result.err and len(result.err.strip().splitlines()) == 1


def test_recipe_overrides_are_validated_values_and_recorded(zoo, text_file, tmp_path):
    result = zoo("train", BASE, "--data", str(text_file), "--steps", "2", "--set", "batch_size=6",
                 "--set", "lr_schedule=constant", "--set", 'notes="tried"', "--set", "eval_windows=8",
                 "--out", str(tmp_path / "run"), "--quiet")
    assert result.code == 0, result.err
    registry = (tmp_path / "run" / "registry.toml").read_text()
    assert "batch_size = 6" in registry and 'lr_schedule = "constant"' in registry and 'notes = "tried"' in registry


@pytest.fixture(scope="module")
def corpus():
    tokenizer = zoo_core.load_tokenizer(zoo_core.get_variant(BASE))
    return Corpus.from_text(read_text_file(ROOT / "data" / "tinyshakespeare.txt").text[:50_000], tokenizer, 0.9)


def _train(corpus, grad_accum: int = 1, **recipe):
    settings = dict(steps=4, batch_size=12, seed=9, learning_rate=3e-3, eval_every=2, eval_windows=8) | recipe
    network = seeded_network(lambda: zoo_core.build_network(zoo_core.get_variant(BASE)), 9)
    job = TrainingJob(recipe=Recipe(**settings), corpus=corpus, context_length=64, grad_accum=grad_accum)
    return network, StandardTrainer().run(network, job)


# float32's unit roundoff, and Higham's gamma_n = n*u / (1 - n*u): a sum of n terms, in any
# order, is within gamma_n * sum(|terms|) of the exact sum (N. J. Higham, Accuracy and
# Stability of Numerical Algorithms, 2nd ed., SIAM 2002, eq. (3.5) and section 4.2).
UNIT_ROUNDOFF = 2.0**-24


def gamma(n: int) -> float:
    return n * UNIT_ROUNDOFF / (1 - n * UNIT_ROUNDOFF)


def record_absolute_terms(network) -> dict[str, torch.Tensor]:
    """Hooks that add up, for every parameter element, the absolute values of the
    per-position terms its gradient sums over the batch (sum_t |term_t|): what the
    rounding of that sum is bounded by. Filled by each backward pass that follows."""
    absolute: dict[str, torch.Tensor] = {name: torch.zeros_like(p) for name, p in network.named_parameters()}

    def linear(prefix, module, x, dy):
        absolute[f"{prefix}.weight"] += dy.abs().flatten(0, -2).T @ x.abs().flatten(0, -2)
        if module.bias is not None:
            absolute[f"{prefix}.bias"] += dy.abs().flatten(0, -2).sum(0)

    def layer_norm(prefix, module, x, dy):
        normalized = torch.nn.functional.layer_norm(x, module.normalized_shape, eps=module.eps)
        absolute[f"{prefix}.weight"] += (dy * normalized).abs().flatten(0, -2).sum(0)
        absolute[f"{prefix}.bias"] += dy.abs().flatten(0, -2).sum(0)

    def embedding(prefix, module, x, dy):
        absolute[f"{prefix}.weight"].index_add_(0, x.flatten(), dy.abs().flatten(0, -2))

    def token_embedding(prefix, module, x, dy):
        embedding(prefix, module, x, dy)
        # The learned positions' table is looked up once, (T, C), and broadcast over the
        # windows where it is added to these embeddings, so its own hook would see the
        # windows' terms already summed: its row t sums this gradient at position t.
        absolute["positions.table.weight"] += dy.abs().sum(0)

    kinds = {torch.nn.Linear: linear, torch.nn.LayerNorm: layer_norm, torch.nn.Embedding: embedding}
    by_name = {"token_embedding": token_embedding, "positions.table": None}
    for prefix, module in network.named_modules():
        record = by_name.get(prefix, kinds.get(type(module)))
        if record is not None:

            def forward_hook(module, inputs, output, prefix=prefix, record=record):
                if torch.is_grad_enabled():  # a training forward, not an evaluation
                    x = inputs[0].detach()
                    output.register_hook(lambda dy: record(prefix, module, x, dy.detach()))

            module.register_forward_hook(forward_hook)
    return absolute


def test_gradient_accumulation_equals_the_whole_batch(corpus):
    """One SGD step on a batch of 12 windows of 64 tokens, whole and in four micro-batches.

    Exactly, both gradients are the mean of the same n = 12 * 64 per-position terms (the
    loss scale 1/4 * 1/192 rounds to the same float as 1/768); in float32 they add them
    in a different order (one sum of 768, or four sums of 192 then three additions), so
    each element differs by at most 2 * gamma_n * sum_t |term_t| (both are within
    gamma_n of the exact sum). The SGD update multiplies that by the learning rate, and
    each run rounds lr * g and its new weight once more (u * lr * |g| and u * |w| each).
    The first batch loss is a mean of n positive terms: within 2 * gamma_n of each
    other, relatively.

    The comparison stops at one SGD step on purpose: AdamW divides each gradient by its
    own size (sqrt(v) + 1e-8), so an element whose gradient is near zero turns a
    rounding difference into up to twice the learning rate; and every later step starts
    from different weights. Those are the tolerance-level promises of
    docs/determinism.md, not an equality.
    """
    settings = dict(steps=1, batch_size=12, seed=9, learning_rate=3e-3, optimizer="sgd", eval_windows=8)
    n = settings["batch_size"] * 64  # the positions each gradient element sums over
    runs = {}
    for grad_accum in (1, 4):
        network = seeded_network(lambda: zoo_core.build_network(zoo_core.get_variant(BASE)), 9)
        initial = {name: p.detach().clone() for name, p in network.named_parameters()}
        absolute = record_absolute_terms(network)
        job = TrainingJob(recipe=Recipe(**settings), corpus=corpus, context_length=64, grad_accum=grad_accum)
        result = StandardTrainer().run(network, job)
        runs[grad_accum] = network, result, absolute
    (whole, whole_result, absolute), (split, split_result, _) = runs[1], runs[4]
    assert len(absolute) == len(initial) and all(a.abs().sum() > 0 for a in absolute.values())  # every term seen

    for name, parameter in whole.named_parameters():
        gradient_bound = 2 * gamma(n) * absolute[name]
        other = dict(split.named_parameters())[name]
        assert (other.grad - parameter.grad).abs().le(gradient_bound).all(), name
        rate = settings["learning_rate"]
        rounding = UNIT_ROUNDOFF * (parameter.abs() + other.abs() + rate * (parameter.grad.abs() + other.grad.abs()))
        weight_bound = rate * gradient_bound + rounding
        assert (other.detach() - parameter.detach()).abs().le(weight_bound).all(), name
        assert not torch.equal(parameter.detach(), initial[name]), name  # the step did move it
    (first_whole,), (first_split,) = whole_result.history, split_result.history
    assert first_split["train_batch"] == pytest.approx(first_whole["train_batch"], rel=2 * gamma(n), abs=0)


def test_gradient_accumulation_must_split_the_batch_evenly(zoo, text_file):
    result = zoo("train", "x", "--from", BASE, "--data", str(text_file), "--grad-accum", "5", "--quiet")
    assert result.code != 0 and "--grad-accum 5" in result.err


def test_keep_best_ends_with_the_best_evaluations_weights(corpus):
    # A learning rate far too high makes the loss climb after the first steps.
    network, result = _train(corpus, steps=8, learning_rate=0.5, keep="best", eval_every=1)
    losses = [entry["validation"] for entry in result.history]
    best = min(range(len(losses)), key=losses.__getitem__)
    assert best < len(losses) - 1, losses  # the run did get worse, so keeping the best matters
    assert result.kept_step == result.history[best]["step"] and result.final["validation"] == losses[best]
    from zoo_core.corpus.batches import fixed_windows, mean_loss

    x, y = fixed_windows(corpus.validation, 64, 8)
    assert mean_loss(network, x, y) == pytest.approx(losses[best], rel=1e-6)


def test_patience_stops_early_and_the_card_records_it(zoo, tmp_path):
    result = zoo("train", BASE, "--steps", "40", "--set", "learning_rate=0.5", "--set", "eval_every=1",
                 "--set", "eval_windows=8", "--patience", "2", "--keep", "best", "--out", str(tmp_path / "run"), "--quiet")
    assert result.code == 0, result.err
    card = zoo_core.get_variant(BASE).card  # the built-in card is unchanged
    assert card.recipe.patience is None
    trained = json.loads((tmp_path / "run" / f"{BASE}.history.json").read_text())
    steps = [entry["step"] for entry in trained["history"]]
    assert steps[-1] < 40
    registry = (tmp_path / "run" / "registry.toml").read_text()
    assert "patience = 2" in registry and 'keep = "best"' in registry
    assert f"stopped_at = {steps[-1]}" in registry and "kept_step = " in registry
    # The summary and the description say where it stopped, not the recipe's 40 steps.
    stop = f"stopped early at step {steps[-1]} of 40 (no better validation loss in 2 evaluations)"
    assert stop in result.out and "after 40 steps" not in result.out
    assert f"This run {stop}." in registry


def test_an_early_stopped_fine_tunes_description_says_so(zoo, text_file):
    result = zoo("train", "my-stop", "--from", BASE, "--data", str(text_file), "--steps", "40", "--set", "learning_rate=0.5",
                 "--set", "eval_every=1", "--set", "eval_windows=8", "--patience", "1", "--quiet")
    assert result.code == 0, result.err
    card = zoo_core.get_variant("my-stop").card
    stopped = card.metrics.stopped_at
    assert stopped is not None and stopped < 40
    assert card.description == (
        f"Fine-tuned from '{BASE}' on mine.txt; stopped early at step {stopped} of 40 "
        f"(no better validation loss in 1 evaluation)."
    )
