"""One-token decoding (plugins/models/decoding.py) gives the blocks' own cached
forward bit for bit, is really taken for the built-in blocks, and steps aside for
anything it does not know: hooks, third-party blocks, encodings that bias scores,
training mode."""

from __future__ import annotations

import pytest
import torch

import zoo_core
from zoo_core.plugin_api.components import PositionEncodingBase
from zoo_core.plugin_api.manager import get_plugins
from zoo_core.inference.sampling import sample_tokens

from zoo_plugins.blocks.attention import KVCache
from zoo_plugins.blocks.blocks import PreNormBlock
from zoo_plugins.models import decoding
from zoo_plugins.models.transformer import TransformerLanguageModel

VOCAB, WINDOW = 40, 12

# Each layout the built-in blocks can take, at least once.
LAYOUTS = [
    dict(positions="learned", block="pre-norm"),
    dict(positions="sinusoidal", block="post-norm"),
    dict(positions="none", block="pre-norm", norm="rmsnorm", activation="gelu"),
    dict(positions="rope", block="pre-norm", activation="gelu-tanh", layer_bias=True),
    dict(positions="rope", block="post-norm", norm="rmsnorm", layer_bias=False),
    dict(positions="learned", block="pre-norm", layer_bias=False, tie_embeddings=True, bias=False, norm_eps=1e-6),
    dict(positions="rope", block="pre-norm", activation="relu2", qk_norm=True, logit_softcap=15.0),
    dict(positions="learned", block="post-norm", qk_norm=True),
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


def _count_decoded_tokens(monkeypatch) -> list[int]:
    decoded = []
    real = decoding.decode

    def counting(model, idx, cache):
        decoded.append(idx.shape[1])
        return real(model, idx, cache)

    monkeypatch.setattr("zoo_plugins.models.transformer.decode", counting)
    return decoded


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: "-".join(str(v) for v in layout.values()))
def test_decoding_gives_the_blocks_own_logits_bit_for_bit(layout, monkeypatch):
    model = _model(**layout)
    ids = torch.randint(0, VOCAB, (2, WINDOW), generator=torch.Generator().manual_seed(1))
    decoded = _count_decoded_tokens(monkeypatch)
    fast = _cached_logits(model, ids, prompt=3)
    assert decoded == [1] * (WINDOW - 3)  # every single token went through decode
    # A hook on any submodule sends every token through the blocks' own forward.
    handle = model.blocks[0].feed_forward.up.register_forward_hook(lambda *_: None)
    try:
        own = _cached_logits(model, ids, prompt=3)
    finally:
        handle.remove()
    assert decoded == [1] * (WINDOW - 3)
    assert torch.equal(fast, own)
    # and both are the uncached forward, to rounding
    torch.testing.assert_close(fast, model(ids)[0], rtol=1e-4, atol=1e-5)


def test_a_hook_added_between_tokens_sees_the_next_token(monkeypatch):
    model = _model(positions="learned", block="pre-norm")
    decoded = _count_decoded_tokens(monkeypatch)
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
    assert decoded == [1, 1]  # tokens 2 and 4; token 3 ran where the hook could see it
    assert seen == [torch.Size([1, 1, 16])]


def test_sampling_takes_the_decoding_path_for_a_shipped_variant(monkeypatch):
    model = zoo_core.load("gpt-char-mini")
    decoded = _count_decoded_tokens(monkeypatch)
    prompt = torch.tensor([model.tokenizer.encode("ROMEO:")])
    tokens = sample_tokens(model.network, prompt, 20, generator=torch.Generator().manual_seed(3))
    assert len(decoded) == 19  # the prompt in one call, then each drawn token but the last
    handle = model.network.final_norm.register_forward_hook(lambda *_: None)
    try:
        again = sample_tokens(model.network, prompt, 20, generator=torch.Generator().manual_seed(3))
    finally:
        handle.remove()
    assert len(decoded) == 19 and torch.equal(tokens, again)


class _ThirdPartyBlock(PreNormBlock):
    """The same arithmetic under a type `decode` does not know."""


class _BiasingPositions(PositionEncodingBase):
    def __init__(self, **_):
        super().__init__()

    def bias(self, q_positions, k_positions):
        return -(q_positions[:, None] - k_positions[None, :]).abs().float()[None]  # (1, Tq, Tk)


@pytest.mark.parametrize("change", ["third-party block", "biasing encoding", "training mode"])
def test_what_decoding_does_not_know_takes_the_blocks_own_path(change, monkeypatch):
    model = _model(positions="learned", block="pre-norm")
    if change == "third-party block":
        model.blocks[1].__class__ = _ThirdPartyBlock
    elif change == "biasing encoding":
        model.positions = _BiasingPositions()
        model._embeds_positions = False
    else:
        model.train()
    decoded = _count_decoded_tokens(monkeypatch)
    ids = torch.randint(0, VOCAB, (1, 6), generator=torch.Generator().manual_seed(4))
    _cached_logits(model, ids, prompt=2)
    assert decoded == []


def test_keys_and_values_side_by_side_are_stored_as_append_stores_them():
    k, v = torch.randn(2, 3, 1, 4), torch.randn(2, 3, 1, 4)
    one, two = KVCache(5), KVCache(5)
    for position in range(3):
        positions = torch.tensor([position])
        keys, values, kept = one.append(k + position, v - position, positions)
        both, kept_too = two.append_keys_values(torch.stack((k + position, v - position)), positions)
        assert torch.equal(both[0], keys) and torch.equal(both[1], values) and torch.equal(kept, kept_too)
    assert one.length == two.length == 3 and torch.equal(one.k[:, :, :3], two.k[:, :, :3])
    with pytest.raises(ValueError, match="holds 5 tokens"):
        two.append_keys_values(torch.zeros(2, 2, 3, 3, 4), torch.arange(3, 6))


def test_a_hook_on_every_module_is_honoured(monkeypatch):
    model = _model(positions="learned", block="pre-norm")
    decoded = _count_decoded_tokens(monkeypatch)
    calls = []
    handle = torch.nn.modules.module.register_module_forward_hook(lambda module, args, output: calls.append(type(module).__name__))
    try:
        _cached_logits(model, torch.randint(0, VOCAB, (1, 5), generator=torch.Generator().manual_seed(5)), prompt=2)
    finally:
        handle.remove()
    # the prompt and three single tokens, each through 2 blocks of 4 linear layers and the head
    assert decoded == [] and calls.count("Linear") == 4 * (2 * 4 + 1)


class _OwnBlock(torch.nn.Module):
    """A third-party block of its own: no `attention` or `feed_forward` attribute."""

    def __init__(self, **_):
        super().__init__()
        self.mix = torch.nn.Linear(16, 16)

    def forward(self, x, positions, encoding, need_weights=False, cache=None):
        return x + self.mix(x), None  # position-wise: nothing to cache


def test_a_block_of_another_shape_is_left_to_its_own_forward(monkeypatch):
    model = _model(positions="learned", block="pre-norm")
    model.blocks[0] = _OwnBlock()
    decoded = _count_decoded_tokens(monkeypatch)
    logits = _cached_logits(model, torch.randint(0, VOCAB, (1, 5), generator=torch.Generator().manual_seed(6)), prompt=2)
    assert decoded == [] and logits.shape == (1, 5, VOCAB)
