"""The speedrun's ingredients, each usable by any variant: Muon beside AdamW, the
warm-up/stable/decay schedule, ReLU², QK-norm and soft-capped logits."""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError
from torch.nn import functional as F

from zoo_core.catalogue.cards import Recipe
from zoo_core.devices import Placement
from zoo_core.plugin_api.manager import get_plugins
from zoo_core.training.optimizers import MuonWithAdamW, make_optimizer, muon_matrices, orthogonalise
from zoo_core.training.step import learning_rate_at, training_step
from zoo_plugins.blocks.attention import CausalSelfAttention
from zoo_plugins.blocks.blocks import ACTIVATIONS

VOCAB, WINDOW = 30, 16


def _gpt(**config) -> torch.nn.Module:
    torch.manual_seed(0)
    base = {"vocab_size": VOCAB, "context_length": WINDOW, "d_model": 32, "n_layer": 2, "n_head": 4, "dropout": 0.0}
    return get_plugins().components["models"].create("gpt", {**base, **config}, get_plugins().components)


def test_relu2_is_relu_squared():
    x = torch.linspace(-3, 3, 61)
    assert torch.equal(ACTIVATIONS["relu2"](x), F.relu(x) ** 2)


def test_qk_norm_normalises_each_heads_queries_and_keys():
    torch.manual_seed(0)
    attention = CausalSelfAttention(32, 4, qk_norm=True).eval()
    x = torch.randn(2, 8, 32) * 50  # large activations: without the norm the softmax saturates
    q, k, v = (t.view(2, 8, 4, 8).transpose(1, 2) for t in attention.qkv(x).split(32, dim=2))
    q, k = (t / t.pow(2).mean(-1, keepdim=True).add(torch.finfo(t.dtype).eps).sqrt() for t in (q, k))
    scores = (q @ k.mT) / math.sqrt(8)
    expected = torch.softmax(scores.masked_fill(torch.ones(8, 8).triu(1).bool(), float("-inf")), -1) @ v
    expected = attention.proj(expected.transpose(1, 2).reshape(2, 8, 32))
    positions = torch.arange(8)
    got, weights = attention(x, positions, get_plugins().components["positions"].create("none", d_model=32, n_head=4, context_length=8), need_weights=True)
    torch.testing.assert_close(got, expected)
    assert weights[..., 1:, :].max() < 1  # bounded scores: past the first token, no head is forced onto one key


def test_soft_capped_logits_stay_inside_the_cap():
    raw_model, capped_model = _gpt(), _gpt(logit_softcap=2.0)
    capped_model.load_state_dict(raw_model.state_dict())
    with torch.no_grad():
        for p in (raw_model.lm_head.weight, capped_model.lm_head.weight):
            p.mul_(100)  # logits far outside the cap
    ids = torch.randint(0, VOCAB, (2, WINDOW), generator=torch.Generator().manual_seed(1))
    raw, capped = raw_model(ids)[0], capped_model(ids)[0]
    assert capped.abs().max() <= 2.0 < raw.abs().max()
    torch.testing.assert_close(capped, 2.0 * torch.tanh(raw / 2.0))


def test_a_logit_scale_multiplies_the_head_output_before_the_cap():
    plain, scaled = _gpt(), _gpt(logit_scale=0.25, logit_softcap=2.0)
    scaled.load_state_dict(plain.state_dict())
    ids = torch.randint(0, VOCAB, (2, WINDOW), generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(scaled(ids)[0], 2.0 * torch.tanh(plain(ids)[0] * 0.25 / 2.0))
    with pytest.raises(Exception, match="logit_scale must be a positive number"):
        _gpt(logit_scale=-1.0)


def test_a_cap_that_is_not_positive_is_refused():
    with pytest.raises(Exception, match="logit_softcap must be a positive number"):
        _gpt(logit_softcap=0.0)


def test_muon_takes_the_hidden_matrices_and_adamw_the_rest():
    model = _gpt()
    chosen = {name for name, p in model.named_parameters() if any(p is m for m in muon_matrices(model))}
    expected = {
        f"blocks.{i}.{name}.weight"
        for i in range(2)
        for name in ("attention.qkv", "attention.proj", "feed_forward.up", "feed_forward.down")
    }
    assert chosen == expected  # not the embeddings, the head, norms or biases
    tied = _gpt(tie_embeddings=True)
    assert all(p is not tied.token_embedding.weight for p in muon_matrices(tied))


def test_orthogonalised_updates_have_singular_values_near_one():
    matrices = torch.randn(3, 48, 16, generator=torch.Generator().manual_seed(0)) * torch.tensor([1e-3, 1.0, 1e3])[:, None, None]
    for update in orthogonalise(matrices):
        values = torch.linalg.svdvals(update)
        assert 0.5 < values.min() and values.max() < 1.5, values  # whatever the gradient's scale


def test_one_step_moves_both_groups_at_their_own_scheduled_rates():
    model = _gpt()
    recipe = Recipe(optimizer="muon", learning_rate=2e-3, muon_learning_rate=0.04, lr_schedule="wsd", warmup_steps=4, steps=10)
    optimizer = make_optimizer(model, recipe)
    assert isinstance(optimizer, MuonWithAdamW)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    ids = torch.randint(0, VOCAB, (4, WINDOW + 1), generator=torch.Generator().manual_seed(2))
    training_step(model, optimizer, ids[:, :-1], ids[:, 1:], step=2, recipe=recipe, placement=Placement())
    muon_group, adamw_group = optimizer.param_groups
    assert muon_group["lr"] == pytest.approx(0.04 * 2 / 4) and adamw_group["lr"] == pytest.approx(2e-3 * 2 / 4)
    assert all(not torch.equal(before[name], p) for name, p in model.named_parameters())  # every parameter moved


def test_warmup_stable_decay_schedule():
    recipe = Recipe(learning_rate=1.0, lr_schedule="wsd", warmup_steps=10, steps=100, cooldown_fraction=0.3, min_learning_rate=0.1)
    rates = [learning_rate_at(step, recipe, 100) for step in range(1, 101)]
    assert rates[:10] == pytest.approx([s / 10 for s in range(1, 11)])  # linear warm-up
    assert rates[9:70] == [1.0] * 61  # flat for all but the last 30% of the steps
    assert rates[70:] == sorted(rates[70:], reverse=True) and rates[70] < 1.0  # then a linear cool-down
    assert rates[-1] == pytest.approx(0.1 + 0.9 / 31)  # the last step is one step above the floor


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"muon_learning_rate": 0.02}, "muon_learning_rate applies to optimizer 'muon', not 'adamw'"),
        ({"cooldown_fraction": 0.2, "lr_schedule": "cosine"}, "cooldown_fraction applies to lr_schedule 'wsd', not 'cosine'"),
    ],
)
def test_settings_that_would_not_apply_are_refused(settings, message):
    with pytest.raises(ValidationError, match=message):
        Recipe(**settings)
