"""Cached decoding runs the blocks' own forward: one token at a time through the
KV cache gives the uncached logits, for every layout the built-in blocks take,
for encodings that bias scores, with hooks set between tokens, and for blocks of
another shape."""

from __future__ import annotations

import pytest
import torch

import zoo_core
from zoo_core.inference.sampling import sample_tokens
from zoo_core.plugin_api.components import PositionEncodingBase
from zoo_core.plugin_api.manager import get_plugins
from zoo_plugins.blocks.attention import KVCache
from zoo_plugins.models.transformer import TransformerLanguageModel

VOCAB, WINDOW = 40, 12

# Each layout the built-in blocks can take, at least once.
LAYOUTS = [
    dict(positions="learned", block="pre-norm"),
    dict(positions="sinusoidal", block="post-norm"),
    dict(positions="none", block="pre-norm", norm="rmsnorm", mlp="gelu"),
    dict(positions="rope", block="pre-norm", mlp="gelu-tanh", layer_bias=True),
    dict(positions="rope", block="post-norm", norm="rmsnorm", layer_bias=False),
    dict(positions="learned", block="pre-norm", layer_bias=False, tie_embeddings=True, bias=False, norm_eps=1e-6),
    dict(positions="rope", block="pre-norm", mlp="relu2", qk_norm=True, logit_softcap=15.0),
    dict(positions="learned", block="post-norm", qk_norm=True),
    # the families' layouts (docs/cards.md)
    dict(positions="rope", norm="rmsnorm", mlp="swiglu", n_kv_head=1, layer_bias=False, rope_base=500000.0),
    dict(positions="rope", residual="parallel", rotary_fraction=0.5, mlp="gelu", layer_bias=True),
    dict(positions="rope", norm="rmsnorm", mlp="geglu", attention_bias="qkv", sliding_window=3, embedding_scale=4.0),
    dict(positions="rope", qk_norm="rmsnorm", head_size=4, n_kv_head=1, residual="parallel-shared-norm"),
    dict(positions="rope", rope_scaling={"kind": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_context_length": 4}),
]


def _model(**layout) -> TransformerLanguageModel:
    torch.manual_seed(0)
    components = get_plugins().components
    return TransformerLanguageModel(VOCAB, WINDOW, 16, 2, 2, components=components, **layout).eval()


def _cached_logits(model, ids: torch.Tensor, prompt: int) -> torch.Tensor:
    """The prompt in one call, then one token per call, through the model's cache."""
    cache = model.make_cache()
    with torch.inference_mode():
        steps = [model(ids[:, :prompt], cache=cache)[0]]
        steps += [model(ids[:, t : t + 1], cache=cache)[0] for t in range(prompt, ids.shape[1])]
    return torch.cat(steps, dim=1)


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: "-".join(str(v) for v in layout.values()))
def test_cached_decoding_gives_the_uncached_logits(layout):
    model = _model(**layout)
    ids = torch.randint(0, VOCAB, (2, WINDOW), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(_cached_logits(model, ids, prompt=3), model(ids)[0], rtol=1e-4, atol=1e-5)


def test_a_hook_added_between_tokens_sees_the_next_token():
    model = _model(positions="learned", block="pre-norm")
    seen = []
    cache = model.make_cache()
    ids = torch.randint(0, VOCAB, (1, 6), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        model(ids[:, :2], cache=cache)
        model(ids[:, 2:3], cache=cache)
        handle = model.blocks[1].attention.proj.register_forward_pre_hook(lambda module, args: seen.append(args[0].shape))
        model(ids[:, 3:4], cache=cache)
        handle.remove()
        model(ids[:, 4:5], cache=cache)
    assert seen == [torch.Size([1, 1, 16])]


def test_a_hook_point_sees_every_cached_token():
    model = _model(positions="rope", block="pre-norm")
    ids = torch.randint(0, VOCAB, (1, 6), generator=torch.Generator().manual_seed(2))
    shapes = []
    with zoo_core.plugin_api.hook_points.hooks(model, {"blocks.1.attention.heads": lambda a, name: shapes.append(a.shape)}):
        hooked = _cached_logits(model, ids, prompt=2)
    assert shapes == [torch.Size([1, 2, 2, 8])] + [torch.Size([1, 1, 2, 8])] * 4
    assert torch.equal(hooked, _cached_logits(model, ids, prompt=2))


def test_sampling_a_shipped_variant_with_the_cache_draws_the_uncached_tokens():
    model = zoo_core.load("gpt-char-mini")
    prompt = torch.tensor([model.tokenizer.encode("ROMEO:")])
    cached = sample_tokens(model.network, prompt, 20, generator=torch.Generator().manual_seed(3))
    uncached = sample_tokens(model.network, prompt, 20, generator=torch.Generator().manual_seed(3), use_cache=False)
    assert torch.equal(cached, uncached)


class _BiasingPositions(PositionEncodingBase):
    def __init__(self, **_):
        super().__init__()

    def bias(self, q_positions, k_positions):
        return -(q_positions[:, None] - k_positions[None, :]).abs().float()[None]  # (1, Tq, Tk)


def test_an_encoding_that_biases_scores_is_cached_too():
    model = _model(positions="learned", block="pre-norm")
    model.positions = _BiasingPositions()
    model._embeds_positions = False
    ids = torch.randint(0, VOCAB, (1, 6), generator=torch.Generator().manual_seed(4))
    torch.testing.assert_close(_cached_logits(model, ids, prompt=2), model(ids)[0], rtol=1e-4, atol=1e-5)


def test_the_cache_refuses_tokens_past_its_capacity():
    k, v = torch.randn(2, 3, 1, 4), torch.randn(2, 3, 1, 4)
    cache = KVCache(5)
    for position in range(3):
        keys, values, kept = cache.append(k + position, v - position, torch.tensor([position]))
    assert cache.length == 3 and torch.equal(kept, torch.arange(3)) and torch.equal(keys[:, :, 2:], k + 2)
    with pytest.raises(ValueError, match="holds 5 tokens"):
        cache.append(torch.zeros(2, 3, 3, 4), torch.zeros(2, 3, 3, 4), torch.arange(3, 6))


def test_a_hook_on_every_module_is_honoured():
    model = _model(positions="learned", block="pre-norm")
    calls = []
    handle = torch.nn.modules.module.register_module_forward_hook(lambda module, args, output: calls.append(type(module).__name__))
    try:
        _cached_logits(model, torch.randint(0, VOCAB, (1, 5), generator=torch.Generator().manual_seed(5)), prompt=2)
    finally:
        handle.remove()
    # the prompt and three single tokens, each through 2 blocks of 4 linear layers and the head
    assert calls.count("Linear") == 4 * (2 * 4 + 1)


class _OwnBlock(torch.nn.Module):
    """A third-party block of its own: no `attention` or `feed_forward` attribute."""

    def __init__(self, **_):
        super().__init__()
        self.mix = torch.nn.Linear(16, 16)

    def forward(self, x, positions, encoding, need_weights=False, cache=None):
        return x + self.mix(x), None  # position-wise: nothing to cache


def test_a_block_of_another_shape_is_cached_through_its_own_forward():
    model = _model(positions="learned", block="pre-norm")
    model.blocks[0] = _OwnBlock()
    ids = torch.randint(0, VOCAB, (1, 5), generator=torch.Generator().manual_seed(6))
    torch.testing.assert_close(_cached_logits(model, ids, prompt=2), model(ids)[0], rtol=1e-4, atol=1e-5)
