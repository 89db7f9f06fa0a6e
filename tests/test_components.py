"""The seed-000 building blocks, checked against their definitions."""

from __future__ import annotations

import math

import pytest
import torch

from zoo_core.errors import ZooError
from zoo_core.plugin_api.manager import get_plugins
from zoo_plugins.blocks.attention import CausalSelfAttention
from zoo_plugins.blocks.blocks import PostNormBlock, PreNormBlock
from zoo_plugins.positions.encodings import LearnedPositions, NoPositions, SinusoidalPositions


def test_attention_fast_path_matches_explicit_weights():
    torch.manual_seed(0)
    attention = CausalSelfAttention(d_model=32, n_head=4).eval()
    x, positions = torch.randn(3, 10, 32), torch.arange(10)
    explicit, weights = attention(x, positions, NoPositions(), need_weights=True)
    fast, none = attention(x, positions, NoPositions(), need_weights=False)
    assert none is None
    torch.testing.assert_close(fast, explicit, rtol=1e-5, atol=1e-6)
    assert weights.shape == (3, 4, 10, 10)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4, 10))
    assert torch.all(weights.triu(diagonal=1) == 0), "a token attended to the future"


def test_attention_future_tokens_do_not_change_the_past():
    torch.manual_seed(1)
    attention = CausalSelfAttention(d_model=16, n_head=2).eval()
    x = torch.randn(1, 6, 16)
    changed = x.clone()
    changed[:, 4:] = torch.randn(1, 2, 16)
    a, _ = attention(x, torch.arange(6), NoPositions())
    b, _ = attention(changed, torch.arange(6), NoPositions())
    torch.testing.assert_close(a[:, :4], b[:, :4])


def test_sinusoidal_follows_section_3_5():
    d_model = 8
    encoding = SinusoidalPositions(d_model=d_model)
    vectors = encoding.vectors(torch.arange(1000))
    for pos in (0, 3, 999):  # far past any training context: still computable
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            assert vectors[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-4)
            assert vectors[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-4)
    assert list(encoding.parameters()) == [] and encoding.state_dict() == {}


def test_learned_positions_refuse_positions_past_the_table():
    encoding = LearnedPositions(d_model=4, context_length=8)
    with pytest.raises(ZooError, match="learned positions stop at 7"):
        encoding.embed(torch.zeros(1, 9, 4), torch.arange(9))


def test_post_norm_normalises_the_residual_stream_pre_norm_does_not():
    torch.manual_seed(2)
    x = 5 * torch.randn(2, 8, 32) + 3
    post, _ = PostNormBlock(d_model=32, n_head=2)(x, torch.arange(8), NoPositions())
    pre, _ = PreNormBlock(d_model=32, n_head=2)(x, torch.arange(8), NoPositions())
    torch.testing.assert_close(post.mean(-1), torch.zeros(2, 8), atol=1e-5, rtol=0)
    torch.testing.assert_close(post.std(-1, unbiased=False), torch.ones(2, 8), atol=1e-3, rtol=0)
    assert pre.mean().item() == pytest.approx(x.mean().item(), abs=0.5)  # the stream passes through


def _transformer(**overrides):
    components = get_plugins().components
    config = {"vocab_size": 50, "context_length": 12, "d_model": 16, "n_layer": 3, "n_head": 2, "positions": "learned", **overrides}
    return components["models"].create("transformer", config, components)


def test_stack_returns_attention_maps_in_layer_order():
    torch.manual_seed(3)
    model = _transformer().eval()
    idx = torch.randint(0, 50, (2, 12))
    maps = model.attention_maps(idx)
    assert [tuple(m.shape) for m in maps] == [(2, 2, 12, 12)] * 3
    assert not torch.equal(maps[0], maps[1])  # each layer has its own parameters
    block_parameters = [{id(p) for p in block.parameters()} for block in model.blocks]
    assert not block_parameters[0] & block_parameters[1]


def test_logits_and_loss_shapes():
    model = _transformer(positions="sinusoidal", block="post-norm")
    idx = torch.randint(0, 50, (4, 12))
    logits, loss = model(idx, idx)
    assert logits.shape == (4, 12, 50) and loss.shape == ()
    assert loss.item() == pytest.approx(math.log(50), abs=0.7)


def test_without_positions_the_last_token_ignores_order():
    # With no positions and a causal mask, permuting the earlier tokens of a
    # prefix leaves the last position's output unchanged: why positions matter.
    torch.manual_seed(4)
    model = _transformer(positions="none", n_layer=1).eval()
    a = torch.tensor([[5, 7, 9, 11]])
    b = torch.tensor([[9, 5, 7, 11]])
    torch.testing.assert_close(model(a)[0][0, -1], model(b)[0][0, -1], rtol=1e-5, atol=1e-5)
    with_positions = _transformer(positions="sinusoidal", n_layer=1).eval()
    assert not torch.allclose(with_positions(a)[0][0, -1], with_positions(b)[0][0, -1])


def test_too_long_input_is_refused():
    with pytest.raises(ZooError, match="exceed the context window of 12"):
        _transformer()(torch.zeros(1, 13, dtype=torch.long))


def test_unknown_config_key_is_named():
    with pytest.raises(ZooError, match="unknown config key.*n_layers"):
        _transformer(n_layers=2)
