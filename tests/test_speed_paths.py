"""The fast paths compute what the plain paths compute.

Speed itself is measured in `benchmarks/`; here: skipped identity calls, fused
AdamW, cheaper interim evaluations and `torch.compile` change no result they
must not change.
"""

from __future__ import annotations

import shutil

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import zoo_core
from zoo_core.catalogue.cards import Recipe
from zoo_core.corpus.batches import Corpus, fixed_windows, mean_loss
from zoo_core.corpus.datasets import read_text_file
from zoo_core.plugin_api.components import PositionEncodingBase, encoding_does
from zoo_core.training.job import TrainingJob
from zoo_core.training.loop import StandardTrainer, interim_windows, make_optimizer, seeded_network
from zoo_plugins.positions.encodings import LearnedPositions, NoPositions, SinusoidalPositions
from zoo_plugins.positions.rope import RotaryPositions

from .conftest import ROOT

VARIANT = "transformer-1b-learned-ctx8"


@pytest.fixture(scope="module")
def corpus():
    tokenizer = zoo_core.load_tokenizer(zoo_core.get_variant("bigram"))
    return Corpus.from_text(read_text_file(ROOT / "data" / "tinyshakespeare.txt").text, tokenizer, 0.9)


def test_encodings_declare_what_they_do():
    assert (LearnedPositions.embeds, LearnedPositions.rotates, LearnedPositions.biases) == (True, False, False)
    assert (SinusoidalPositions.embeds, SinusoidalPositions.rotates) == (True, False)
    assert (RotaryPositions.embeds, RotaryPositions.rotates, RotaryPositions.biases) == (False, True, False)
    assert (NoPositions.embeds, NoPositions.rotates, NoPositions.biases) == (False, False, False)

    class Explicit(PositionEncodingBase):
        rotates = True  # declared, not overridden: the declaration wins

    assert Explicit.rotates and not Explicit.embeds
    assert encoding_does(object(), "biases")  # declares nothing: every method is called


class _Undeclared(nn.Module):
    """Delegates to a real encoding but declares nothing, so nothing is skipped."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def embed(self, x, positions):
        return self.inner.embed(x, positions)

    def rotate(self, q, k, qp, kp):
        return self.inner.rotate(q, k, qp, kp)

    def bias(self, qp, kp):
        return self.inner.bias(qp, kp)


@pytest.mark.parametrize("positions", ["learned", "sinusoidal", "rope", "none"])
def test_skipping_identity_calls_changes_no_logit(positions):
    from zoo_core.plugin_api.manager import get_plugins
    from zoo_plugins.models.transformer import TransformerLanguageModel

    plugins = get_plugins()

    torch.manual_seed(0)
    model = TransformerLanguageModel(50, 16, 16, 2, 2, components=plugins.components, positions=positions).eval()
    idx = torch.randint(0, 50, (2, 16))
    skipped, _ = model(idx)
    model.positions = _Undeclared(model.positions)
    model._embeds_positions = True
    called, _ = model(idx)
    assert torch.equal(skipped, called)


def test_adamw_is_fused_where_the_parameters_allow_and_training_repeats(corpus):
    variant = zoo_core.get_variant(VARIANT)
    recipe = Recipe(steps=12, eval_every=6, eval_windows=16, seed=4, weight_decay=0.01)
    assert make_optimizer(nn.Linear(2, 2), recipe).defaults["fused"] is True
    runs = []
    for _ in range(2):
        network = seeded_network(lambda: zoo_core.build_network(variant), recipe.seed)
        runs.append((StandardTrainer().run(network, TrainingJob(recipe=recipe, corpus=corpus, context_length=8)), network))
    assert runs[0][0].history == runs[1][0].history
    assert all(torch.equal(p, q) for p, q in zip(runs[0][1].parameters(), runs[1][1].parameters()))


def test_interim_evaluations_use_fewer_windows_the_final_one_all(corpus):
    variant = zoo_core.get_variant(VARIANT)
    recipe = Recipe(steps=10, eval_every=5, eval_windows=96, seed=2)
    assert interim_windows(recipe) == 64 and interim_windows(recipe, 10) == 10 and interim_windows(recipe, 500) == 96
    network = seeded_network(lambda: zoo_core.build_network(variant), recipe.seed)
    result = StandardTrainer().run(network, TrainingJob(recipe=recipe, corpus=corpus, context_length=8, interim_eval_windows=10))
    assert [(h["step"], h["windows"]) for h in result.history] == [(1, 10), (5, 10), (10, 96)]
    # The final figure is the full evaluation a card records, on every window.
    assert result.final["validation"] == mean_loss(network, *fixed_windows(corpus.validation, 8, 96))


def test_mean_loss_is_the_token_weighted_mean_of_batch_losses(corpus):
    variant = zoo_core.get_variant(VARIANT)
    network = seeded_network(lambda: zoo_core.build_network(variant), 0)
    inputs, targets = fixed_windows(corpus.validation, 8, 100)
    expected = sum(network(inputs[i : i + 64], targets[i : i + 64])[1].item() * targets[i : i + 64].numel() for i in range(0, 100, 64))
    assert mean_loss(network, inputs, targets) == expected / targets.numel()


def test_final_evaluation_of_a_shipped_checkpoint_matches_its_card():
    from zoo_core.evaluation.scoring import evaluate_language_model

    model = zoo_core.load("transformer-6b-sin")
    report = evaluate_language_model(model)
    assert round(report["validation_loss"], 4) == model.card.metrics.validation_loss
    assert round(report["train_loss"], 4) == model.card.metrics.train_loss


def test_feed_forward_runs_on_rows_with_the_same_bits():
    # Rows keep torch.compile's backward from saving ReLU's boolean mask (see
    # FeedForward.forward); eagerly the answer must not move by a bit.
    from zoo_plugins.blocks.blocks import FeedForward

    torch.manual_seed(0)
    feed_forward = FeedForward(16, 64)
    seen = []
    feed_forward.up.register_forward_pre_hook(lambda _, args: seen.append(args[0].shape))
    x = torch.randn(3, 5, 16, requires_grad=True)
    y = feed_forward(x)
    assert seen == [torch.Size([15, 16])] and y.shape == x.shape
    expected = feed_forward.down(F.relu(feed_forward.up(x)))  # the same layers on (B, T, C)
    assert torch.equal(y, expected)
    assert torch.equal(*(torch.autograd.grad(output.sum(), x)[0] for output in (y, expected)))


@pytest.mark.slow  # compiling takes a minute or more on a busy 2-core machine
@pytest.mark.skipif(shutil.which("gcc") is None and shutil.which("cc") is None, reason="torch.compile on CPU needs a C compiler")
def test_compiled_training_step_gives_the_eager_loss(corpus):
    variant = zoo_core.get_variant(VARIANT)
    recipe = Recipe(steps=3, eval_every=3, eval_windows=8, seed=7)
    eager, compiled = (seeded_network(lambda: zoo_core.build_network(variant), recipe.seed) for _ in range(2))
    a = StandardTrainer().run(eager, TrainingJob(recipe=recipe, corpus=corpus, context_length=8))
    b = StandardTrainer().run(compiled, TrainingJob(recipe=recipe, corpus=corpus, context_length=8, compile=True))
    for x, y in zip(a.history, b.history):
        assert x["train_batch"] == pytest.approx(y["train_batch"], rel=1e-4)
        assert x["validation"] == pytest.approx(y["validation"], rel=1e-4)
    assert set(eager.state_dict()) == set(compiled.state_dict())  # the checkpoint keeps its names


def test_threads_default_by_model_size_and_bad_counts_are_refused(zoo, monkeypatch):
    from zoo_core.inference.threads import default_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert default_threads(800_000) == 1
    assert default_threads(50_000_000) == torch.get_num_threads()
    result = zoo("sample", "gpt-char-mini", "--prompt", "ROMEO:", "--threads", "0")
    assert result.code == 1 and result.err.strip() == "zoo: error: --threads must be at least 1, not 0"
    before = torch.get_num_threads()
    try:
        result = zoo("sample", "gpt-char-mini", "--prompt", "ROMEO:", "--max-new-tokens", "3", "--threads", "1")
        assert result.code == 0 and result.out.startswith("ROMEO:") and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


# --- the training loss ------------------------------------------------------------

def _scored(loss_function, logits, targets):
    logits = logits.detach().clone().requires_grad_()
    loss = loss_function(logits, targets)
    loss.backward()
    return loss.detach(), logits.grad


@pytest.mark.parametrize("rows, vocabulary", [(1024, 1024), (768, 65), (3, 2)])
def test_one_pass_cross_entropy_gives_torchs_loss_and_gradient(rows, vocabulary):
    from torch.nn import functional as F

    from zoo_core.training.losses import cross_entropy

    generator = torch.Generator().manual_seed(rows)
    logits = torch.randn(rows, vocabulary, generator=generator, dtype=torch.float64) * 4
    targets = torch.randint(vocabulary, (rows,), generator=generator)
    ours, theirs = _scored(cross_entropy, logits, targets), _scored(F.cross_entropy, logits, targets)
    assert torch.equal(ours[0], theirs[0])
    torch.testing.assert_close(ours[1], theirs[1], rtol=1e-12, atol=1e-15)  # float64: the same expression
    ours, theirs = _scored(cross_entropy, logits.float(), targets), _scored(F.cross_entropy, logits.float(), targets)
    assert torch.equal(ours[0], theirs[0])  # torch's own forward: the loss bit for bit
    torch.testing.assert_close(ours[1], theirs[1], rtol=1e-5, atol=1e-8)


def test_cross_entropy_without_gradients_is_torchs_own():
    from torch.nn import functional as F

    from zoo_core.training.losses import cross_entropy

    logits, targets = torch.randn(64, 65), torch.randint(65, (64,))
    with torch.no_grad():
        assert torch.equal(cross_entropy(logits, targets), F.cross_entropy(logits, targets))  # evaluations unchanged, bit for bit


def test_cross_entropy_scores_half_precision_in_float32():
    from zoo_core.training.losses import cross_entropy

    logits = torch.randn(16, 65).bfloat16().requires_grad_()
    loss = cross_entropy(logits, torch.randint(65, (16,)))
    loss.backward()
    assert loss.dtype == torch.float32 and logits.grad.dtype == torch.bfloat16


def test_cross_entropy_refuses_a_second_backward_through_its_reused_buffer():
    from zoo_core.training.losses import cross_entropy

    logits = torch.randn(8, 5, requires_grad=True)
    loss = cross_entropy(logits, torch.randint(5, (8,)))
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


# --- loading builds without random weights ------------------------------------------

def test_loading_draws_no_random_initial_weights_and_gives_the_checkpoints():
    from safetensors.torch import load_file

    state = torch.get_rng_state()
    model = zoo_core.load("gpt-char-mini")
    assert torch.equal(torch.get_rng_state(), state)  # nothing was drawn: the random fills were skipped
    saved = load_file(model.variant.checkpoint_path)
    assert all(torch.equal(tensor, saved[name]) for name, tensor in model.network.state_dict().items())


def test_only_the_thread_that_loads_skips_random_fills():
    import threading

    from zoo_core.storage.initialisation import random_init_skipped

    mine, theirs = torch.zeros(1000), torch.zeros(1000)
    with random_init_skipped():
        nn.init.normal_(mine)
        other = threading.Thread(target=nn.init.normal_, args=(theirs,))
        other.start()
        other.join()
        nn.init.zeros_(mine.add_(1))  # deterministic fills still run
    assert torch.count_nonzero(mine) == 0 and torch.count_nonzero(theirs) > 900
    nn.init.normal_(mine)  # outside the context: a random fill again
    assert torch.count_nonzero(mine) > 900
