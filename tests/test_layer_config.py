"""The transformer's typed, per-layer configuration (docs/cards.md, "Transformer layouts"):
a `layers` pattern expands to one spec per layer, each block is built from its own
layer's spec and encoding, the new arithmetic is what it claims, and a card is
refused in one line naming a bad key, at every level."""

from __future__ import annotations

import pytest
import torch

from zoo_core.catalogue.cards import ModelCard
from zoo_core.catalogue.limits import estimate_cost
from zoo_core.errors import ZooError
from zoo_core.inference.sampling import sample_tokens
from zoo_core.loading.sizing import measure_on_meta
from zoo_core.plugin_api.manager import Components, get_plugins
from zoo_plugins.blocks.attention import CausalSelfAttention
from zoo_plugins.blocks.blocks import PreNormBlock
from zoo_plugins.blocks.norms import UnitOffsetRMSNorm, make_norm
from zoo_plugins.models.settings import TransformerConfig
from zoo_plugins.models.transformer import TransformerLanguageModel, build_transformer
from zoo_plugins.positions.rope import RotaryPositions

from .hostile_cards import card_data, hostile_variant

VOCAB, WINDOW = 40, 24
GEMMA3_PATTERN = [{"repeat": 5, "sliding_window": 4, "rope_base": 10000.0}, {"rope_base": 1000000.0}]


def _model(n_layer: int = 2, **settings) -> TransformerLanguageModel:
    torch.manual_seed(0)
    return TransformerLanguageModel(
        VOCAB, WINDOW, 16, n_layer, 2, components=get_plugins().components, **settings
    ).eval()


# --- the pattern ----------------------------------------------------------------------------


def test_a_pattern_cycles_its_groups_until_n_layer():
    config = TransformerConfig.model_validate(
        {"d_model": 16, "n_layer": 14, "n_head": 2, "positions": "rope", "layers": GEMMA3_PATTERN}
    )
    specs = config.layer_specs()
    assert len(specs) == 14
    assert [spec.sliding_window for spec in specs] == [4, 4, 4, 4, 4, None] * 2 + [4, 4]
    assert [spec.rotary.base for spec in specs] == ([10000.0] * 5 + [1000000.0]) * 2 + [10000.0] * 2


def test_a_group_overrides_the_model_wide_settings_for_its_layers_only():
    config = TransformerConfig.model_validate(
        {"d_model": 16, "n_layer": 3, "n_head": 2, "sliding_window": 8, "mlp": "swiglu", "layer_bias": False,
         "layers": [{"sliding_window": False, "mlp": "gelu"}, {"repeat": 2}]}
    )
    specs = config.layer_specs()
    assert [(s.sliding_window, s.mlp) for s in specs] == [(None, "gelu"), (8, "swiglu"), (8, "swiglu")]
    # biases per projection, resolved as the block resolves layer_bias and attention_bias
    assert not any(any((s.qkv_bias, s.proj_bias, s.feed_forward_bias, s.norm_bias)) for s in specs)
    qwen2 = TransformerConfig.model_validate(
        {"d_model": 16, "n_layer": 1, "n_head": 2, "layer_bias": False, "attention_bias": "qkv"}
    ).layer_specs()[0]
    assert (qwen2.qkv_bias, qwen2.proj_bias, qwen2.feed_forward_bias) == (True, False, False)
    seed_000 = TransformerConfig.model_validate({"d_model": 16, "n_layer": 1, "n_head": 2}).layer_specs()[0]
    assert (seed_000.qkv_bias, seed_000.proj_bias, seed_000.feed_forward_bias, seed_000.norm_bias) == (
        False, False, True, True
    )
    assert seed_000.rotary is None  # nothing set: the encoding's own defaults


def test_each_block_gets_its_layers_window_and_encoding():
    model = _model(n_layer=6, positions="rope", layers=GEMMA3_PATTERN)
    windows = [block.attention.sliding_window for block in model.blocks]
    assert windows == [4, 4, 4, 4, 4, None]
    encodings = model._layer_encodings
    assert all(encoding is encodings[0] for encoding in encodings[:5])  # equal settings: one instance
    assert encodings[5] is not encodings[0]
    torch.testing.assert_close(encodings[0].frequencies, RotaryPositions(16, 2, base=10000.0).frequencies)
    torch.testing.assert_close(encodings[5].frequencies, RotaryPositions(16, 2, base=1000000.0).frequencies)
    assert not any("post_" in name or "layer_positions" in name for name in model.state_dict())


def test_layers_without_settings_of_their_own_build_as_before_bit_for_bit():
    ids = torch.randint(0, VOCAB, (2, WINDOW), generator=torch.Generator().manual_seed(1))
    plain = _model(positions="rope", mlp="swiglu")
    patterned = _model(positions="rope", mlp="swiglu", layers=[{"repeat": 2}])
    assert list(plain.state_dict()) == list(patterned.state_dict())
    patterned.load_state_dict(plain.state_dict())
    assert torch.equal(plain(ids)[0], patterned(ids)[0])


@torch.inference_mode()
def test_alternating_windows_and_rope_bases_sample_the_same_through_the_cache_and_the_row_batch():
    """Sliding-window layers of one RoPE base beside global layers of another: the cached
    and batched paths must give each layer its own window and rotation, as the full forward does."""
    model = _model(n_layer=4, positions="rope", norm="rmsnorm-unit-offset", norm_placement="both",
                   layers=[{"sliding_window": 3, "rope_base": 10000.0}, {"rope_base": 500000.0}])
    for parameter in model.parameters():  # away from the initial values, so that every path matters
        parameter.add_(0.3 * torch.randn_like(parameter))
    prompt = torch.tensor([[3, 1, 4, 1, 5]])
    cached = sample_tokens(model, prompt, 12, generator=torch.Generator().manual_seed(5))
    uncached = sample_tokens(model, prompt, 12, generator=torch.Generator().manual_seed(5), use_cache=False)
    assert torch.equal(cached, uncached)
    prompts = [[3, 1, 4, 1, 5, 9], [2, 6], [5, 3, 5, 8, 9, 7, 9, 3]]
    batch = model.make_row_batch(len(prompts))
    rows = {}
    for row, ids in enumerate(prompts):
        cache = model.make_cache()
        logits, _ = model(torch.tensor([ids]), cache=cache)
        batch.add(row, cache)
        rows[row] = ids + [int(logits[0, -1].argmax())]
    for _ in range(8):
        logits = batch.step([rows[row][-1] for row in batch.rows])
        for row, row_logits in zip(batch.rows, logits):
            rows[row].append(int(row_logits.argmax()))
    for row, ids in enumerate(prompts):
        expected = list(ids)
        while len(expected) < len(rows[row]):
            expected.append(int(model(torch.tensor([expected]))[0][0, -1].argmax()))
        assert rows[row] == expected
        assert len(expected) > 3 + 3  # past the window: the sliding layers drop keys


# --- the new arithmetic, against the formulas -------------------------------------------------


@torch.no_grad()
def test_unit_offset_rmsnorm_scales_by_one_plus_its_weight():
    norm = UnitOffsetRMSNorm(8, eps=1e-6)
    assert torch.equal(norm.weight, torch.zeros(8))  # a scale of one to start with
    norm.weight.copy_(torch.linspace(-0.5, 0.5, 8))
    x = torch.randn(2, 3, 8)
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (1 + norm.weight)
    torch.testing.assert_close(norm(x), expected)
    assert isinstance(make_norm("rmsnorm-unit-offset", 8), UnitOffsetRMSNorm)


@torch.no_grad()
@pytest.mark.parametrize("placement", ["after", "both"])
def test_norm_placement_normalises_each_sublayers_output_before_the_residual_add(placement):
    torch.manual_seed(0)
    block = PreNormBlock(16, 2, norm="rmsnorm", norm_placement=placement).eval()
    for norm in (block.post_attention_norm, block.post_feed_forward_norm):
        norm.weight.uniform_(0.5, 1.5)
    x, positions, encoding = torch.randn(2, 5, 16), torch.arange(5), RotaryPositions(16, 2)
    into_attention = block.norm1(x) if placement == "both" else x
    h = x + block.post_attention_norm(block.attention(into_attention, positions, encoding)[0])
    into_feed_forward = block.norm2(h) if placement == "both" else h
    expected = h + block.post_feed_forward_norm(block.feed_forward(into_feed_forward))
    torch.testing.assert_close(block(x, positions, encoding)[0], expected)
    assert hasattr(block, "norm1") == hasattr(block, "norm2") == (placement == "both")


def test_norm_placement_is_refused_where_it_cannot_apply():
    with pytest.raises(ValueError, match="PostNormBlock takes norm_placement 'before', not 'both'"):
        _model(block="post-norm", norm_placement="both")
    with pytest.raises(ValueError, match="norm_placement 'after' takes residual 'sequential', not 'parallel'"):
        PreNormBlock(16, 2, norm_placement="after", residual="parallel")


def _reference_attention(attention, x, positions, encoding, scale, cap, window=None):
    """The scores by hand: q.k * scale, capped to cap tanh(s / cap), masked, softmaxed."""
    B, T, _ = x.shape
    q, k, v = (t.view(B, T, 2, 8).transpose(1, 2) for t in attention.qkv(x).split(16, dim=2))
    q, k = encoding.rotate(q, k, positions, positions)
    scores = (q @ k.transpose(-2, -1)) * scale
    if cap is not None:
        scores = cap * torch.tanh(scores / cap)
    i, j = positions[:, None], positions[None, :]
    allowed = (j <= i) if window is None else (j <= i) & (j > i - window)
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return attention.proj((weights @ v).transpose(1, 2).reshape(B, T, 16)), weights


@torch.no_grad()
@pytest.mark.parametrize("window", [None, 3])
def test_attention_softcap_and_query_scale_are_the_formula(window):
    torch.manual_seed(0)
    attention = CausalSelfAttention(16, 2, softcap=0.5, query_scale=0.3, sliding_window=window).eval()
    attention.qkv.weight.mul_(8)  # scores well past the cap
    x, positions, encoding = torch.randn(2, 7, 16), torch.arange(7), RotaryPositions(16, 2)
    expected, expected_weights = _reference_attention(attention, x, positions, encoding, 0.3, 0.5, window)
    out, weights = attention(x, positions, encoding, need_weights=True)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, expected_weights)
    torch.testing.assert_close(attention(x, positions, encoding)[0], expected)  # the path without weights too
    uncapped = CausalSelfAttention(16, 2, sliding_window=window).eval()
    uncapped.load_state_dict(attention.state_dict())
    assert not torch.allclose(uncapped(x, positions, encoding)[0], expected)


@torch.no_grad()
def test_a_query_scale_alone_goes_through_the_fused_path():
    torch.manual_seed(0)
    attention = CausalSelfAttention(16, 2, query_scale=0.1).eval()
    x, positions, encoding = torch.randn(2, 6, 16), torch.arange(6), RotaryPositions(16, 2)
    expected, _ = _reference_attention(attention, x, positions, encoding, 0.1, None)
    torch.testing.assert_close(attention(x, positions, encoding)[0], expected)


def test_parameters_are_counted_and_bounded_for_a_gemma3_shaped_layout():
    config = dict(vocab_size=50, context_length=16, d_model=24, n_layer=6, n_head=2, n_kv_head=1, head_size=16,
                  d_ff=40, mlp="geglu", norm="rmsnorm-unit-offset", norm_placement="both", positions="rope",
                  layer_bias=False, bias=False, tie_embeddings=True, query_scale=0.25, attention_softcap=50.0,
                  embedding_scale=24**0.5, layers=GEMMA3_PATTERN)
    counted, _ = measure_on_meta(lambda: build_transformer(dict(config), get_plugins().components))
    C, D, F_, L = 24, 16, 40, 6
    per_layer = C * (2 * D + 2 * D) + 2 * D * C + C * 2 * F_ + F_ * C + 4 * C  # qkv, proj, up, down, 4 norms
    assert counted == 50 * C + L * per_layer + C
    assert counted <= estimate_cost(config).parameters <= 1.3 * counted + 10_000


# --- refusals, one line each ------------------------------------------------------------------


def test_an_unknown_key_in_a_layer_group_is_one_line():
    with pytest.raises(ZooError, match=r"^architecture 'transformer': unknown config key\(s\) layers\.1\.windw$"):
        _model(layers=[{"repeat": 1}, {"windw": 4}])
    with pytest.raises(ZooError, match=r"^architecture 'transformer': config\.layers\.0\.d_model: d_model is model-wide"):
        _model(layers=[{"d_model": 8}])


@pytest.mark.parametrize(
    "group, message",
    [
        ({"windw": 4}, "field 'config.layers.0.windw': unknown field"),
        ({"n_head": 4}, "field 'config.layers.0.n_head': n_head is model-wide: a layer group cannot set it"),
        ({"sliding_window": 0}, "field 'config.layers.0.sliding_window': must be at least 1, not 0"),
        ({"repeat": 2.5}, "field 'config.layers.0.repeat': must be a whole number, not 2.5"),
    ],
)
def test_a_card_with_a_bad_layer_group_is_refused_in_one_line(zoo, tmp_path, use_registry, group, message):
    registry = hostile_variant(tmp_path, "layered", config__layers=[group])
    use_registry(registry)
    for command in ("show", "load"):
        result = zoo(command, "layered")
        assert result.code == 1 and result.err.count("\n") == 1, result.err
        assert f"{registry}: variant 'layered': {message}" in result.err


def test_a_card_keeps_its_config_table_as_written():
    data = card_data()
    data["config"]["layers"] = [{"repeat": 1, "rope_base": 10}]
    data["config"]["positions"] = "rope"
    written = dict(data["config"])
    assert ModelCard.model_validate(data).config == written  # no defaults filled in, 10 not 10.0
    assert ModelCard.model_validate(data).model_dump(mode="json")["config"]["layers"][0]["rope_base"] == 10


def test_a_block_that_does_not_name_a_layers_setting_is_refused():
    class WindowlessBlock(torch.nn.Module):
        def __init__(self, d_model, n_head, d_ff=None, dropout=0.0, norm="layernorm", mlp="relu"):
            super().__init__()
            self.attention = CausalSelfAttention(d_model, n_head)

        def forward(self, x, positions, encoding, need_weights=False, cache=None):
            update, weights = self.attention(x, positions, encoding, need_weights, cache)
            return x + update, weights

    blocks = Components("blocks")
    blocks.add("windowless", WindowlessBlock, "test")
    components = {**get_plugins().components, "blocks": blocks}
    with pytest.raises(ZooError, match=r"^block 'windowless' does not take the setting\(s\) sliding_window$"):
        TransformerLanguageModel(8, 4, 8, 2, 2, components=components, block="windowless",
                                 layers=[{"sliding_window": 2}, {}])
    with pytest.raises(ZooError, match=r"^positions 'learned' does not take the setting\(s\) rope_base$"):
        _model(layers=[{"rope_base": 500.0}])
