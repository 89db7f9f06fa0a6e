"""zoo-alibi's own tests: the encoding's numbers, the block's contract, the shipped variant.

They run against the installed plugin when there is one, and against this source
folder otherwise (``pythonpath = ["."]`` in pyproject.toml).
"""

from __future__ import annotations

import math

import pytest
import torch

import zoo_alibi
from zoo_plugins.blocks.attention import CausalSelfAttention
from zoo_alibi.alibi import ALiBiPositions, alibi_slopes
from zoo_alibi.swiglu import SwiGLUPreNormBlock
from zoo_core.loading.api import catalogue, load
from zoo_core.inference.sampling import sample_tokens
from zoo_core.plugin_api.manager import PluginInfo, PluginSet


@pytest.fixture(scope="module")
def plugins() -> PluginSet:
    """Every installed plugin, with this one added if it is not installed."""
    plugin_set = PluginSet()
    plugin_set.load_entry_points()
    if "alibi" not in plugin_set.plugins:
        plugin_set.add_plugin(zoo_alibi, PluginInfo("alibi", "zoo-alibi", zoo_alibi.__version__, builtin=False))
    return plugin_set


def test_slopes_are_the_geometric_sequence_of_the_paper():
    assert alibi_slopes(2).tolist() == [2**-4, 2**-8]
    assert alibi_slopes(8).tolist() == [2.0**-i for i in range(1, 9)]


def test_bias_is_minus_slope_times_distance_and_only_depends_on_distance():
    encoding = ALiBiPositions(n_head=2)
    positions = torch.arange(4)
    bias = encoding.bias(positions, positions)
    assert bias.shape == (2, 4, 4)
    assert bias[0, 3, 1].item() == -2 * 2**-4  # query 3, key 1: distance 2
    assert bias[1, 3, 0].item() == -3 * 2**-8
    assert torch.all(bias.diagonal(dim1=1, dim2=2) == 0)
    assert torch.equal(encoding.bias(positions + 100, positions + 100), bias)  # relative, not absolute
    assert encoding.state_dict() == {}  # nothing to train, nothing saved


def test_core_attention_adds_the_bias_on_both_paths():
    torch.manual_seed(0)
    attention = CausalSelfAttention(d_model=8, n_head=2)
    encoding = ALiBiPositions(n_head=2)
    x, positions = torch.randn(1, 5, 8), torch.arange(5)
    explicit, weights = attention(x, positions, encoding, need_weights=True)
    fused, none = attention(x, positions, encoding, need_weights=False)
    assert none is None
    assert torch.allclose(explicit, fused, atol=1e-6)
    with torch.no_grad():
        attention.qkv.weight.zero_()  # all scores 0: the weights are the softmax of the bias alone
    _, flat = attention(x, positions, encoding, need_weights=True)
    slope = 2**-4
    expected = torch.tensor([math.exp(-slope * d) for d in (2, 1, 0)])
    assert torch.allclose(flat[0, 0, 2, :3], expected / expected.sum())
    assert torch.all(flat[0, :, 2, 3:] == 0)  # causal: no weight on the future


def test_swiglu_block_keeps_the_block_contract():
    block = SwiGLUPreNormBlock(d_model=16, n_head=4, d_ff=40)
    x, positions = torch.randn(2, 6, 16), torch.arange(6)
    out, weights = block(x, positions, ALiBiPositions(n_head=4), need_weights=True)
    assert out.shape == x.shape and weights.shape == (2, 4, 6, 6)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 4, 6))
    assert block(x, positions, ALiBiPositions(n_head=4))[1] is None
    assert sum(p.numel() for p in block.feed_forward.parameters()) == 3 * 16 * 40


def test_the_hooks_register_everything_under_its_name(plugins):
    info = plugins.plugins["alibi"]
    assert info.errors == []
    assert info.registered["positions"] == ["alibi"]
    assert info.registered["blocks"] == ["swiglu-pre-norm"]
    assert plugins.components["positions"].plugin_of("alibi") == "alibi"
    variant = catalogue(plugins).get("alibi-swiglu-4b")
    assert variant.plugin == "alibi"
    assert variant.checkpoint_path.parent == variant.tokenizer_path.parent == variant.source.parent


def test_the_shipped_variant_loads_verified_and_is_causal(plugins):
    model = load("alibi-swiglu-4b", plugins)
    assert model.verification.checks == ["sha256", "names", "shapes", "parameters", "tokenizer sha256"]
    assert model.card.metrics.validation_loss < 4.1  # the zoo's bigram measures about 4.12
    idx = torch.tensor([model.tokenizer.encode("ROMEO: what light through yonder window")])
    logits, _ = model.network(idx)
    changed = idx.clone()
    changed[0, -1] = (changed[0, -1] + 1) % model.card.tokenizer.vocab_size
    assert torch.allclose(model.network(changed)[0][:, :-1], logits[:, :-1], atol=1e-5)


def test_sampling_past_the_window_is_the_same_with_and_without_the_cache(plugins):
    model = load("alibi-swiglu-4b", plugins)
    ids = torch.tensor([model.tokenizer.encode("ROMEO:")])
    runs = [
        sample_tokens(model.network, ids, 40, generator=torch.Generator().manual_seed(3), use_cache=use_cache)
        for use_cache in (False, True)
    ]
    assert runs[0].shape == (1, ids.shape[1] + 40)  # beyond the 32-token window
    assert torch.equal(runs[0], runs[1])


# -- the zoo's testing kit ----------------------------------------------------------------


def test_alibi_and_the_swiglu_block_keep_the_zoo_contracts(plugins):
    from zoo_core.kit import testing

    build = testing.tiny_transformer_builder(plugins, positions="alibi", block="swiglu-pre-norm")
    testing.assert_causal(build())
    testing.assert_kv_cache_matches_uncached(build())  # past the window, and the cache really used
    testing.assert_checkpoint_round_trip(build)
    testing.assert_deterministic(build)


def test_zoo_check_plugin_passes_on_everything_it_registers(plugins):
    from zoo_core.kit import testing

    results = testing.check_plugin("alibi", plugins=plugins)
    assert [r for r in results if not r.passed] == []
    assert {r.subject for r in results} >= {"position 'alibi'", "block 'swiglu-pre-norm'", "variant 'alibi-swiglu-4b'"}
