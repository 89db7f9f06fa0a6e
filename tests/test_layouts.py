"""The transformer's layout settings (docs/cards.md, "Transformer layouts"): each
changes the arithmetic as it claims, a setting a component does not take is
refused in one line at the model, the block and the encoding, and a block
written only against the documented contract gets cached decoding and row
batching with its own forward."""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn import functional as F

from zoo_core.catalogue.cards import ModelCard
from zoo_core.errors import ZooError
from zoo_core.inference.sampling import sample_tokens
from zoo_core.loading.sizing import measure_on_meta
from zoo_core.plugin_api import hooks
from zoo_core.plugin_api.manager import Components, get_plugins
from zoo_plugins.blocks.attention import CausalSelfAttention
from zoo_plugins.blocks.blocks import FeedForward, PreNormBlock, make_norm
from zoo_plugins.models.transformer import TransformerLanguageModel, build_transformer
from zoo_plugins.positions.rope import RotaryPositions, scaled_frequencies

from .hostile_cards import card_data, hostile_variant

VOCAB, WINDOW = 40, 12


def _model(d_model: int = 16, n_head: int = 2, **layout) -> TransformerLanguageModel:
    torch.manual_seed(0)
    return TransformerLanguageModel(
        VOCAB, WINDOW, d_model, 2, n_head, components=get_plugins().components, **layout
    ).eval()


def _ids(T: int = WINDOW, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, T), generator=torch.Generator().manual_seed(seed))


# --- each setting's arithmetic ---------------------------------------------------------


def test_as_many_key_value_heads_as_query_heads_is_multi_head_attention_bit_for_bit():
    ids = _ids()
    assert torch.equal(_model(n_kv_head=2, positions="rope")(ids)[0], _model(positions="rope")(ids)[0])


@torch.no_grad()
def test_grouped_query_attention_shares_each_key_value_head():
    """2 key/value heads for 4 query heads attend as 4 heads whose keys and values are
    copies: query heads 0 and 1 read key/value head 0, heads 2 and 3 head 1."""
    torch.manual_seed(0)
    grouped = CausalSelfAttention(16, 4, n_kv_head=2).eval()
    assert grouped.qkv.weight.shape == ((4 + 2 * 2) * 4, 16)
    plain = CausalSelfAttention(16, 4).eval()
    q, k, v = grouped.qkv.weight.split((16, 8, 8))

    def shared(rows):  # (2 heads * 4, 16) -> (4 heads * 4, 16), each head twice in a row
        return rows.view(2, 4, 16).repeat_interleave(2, dim=0).reshape(16, 16)

    plain.qkv.weight.copy_(torch.cat([q, shared(k), shared(v)]))
    plain.proj.load_state_dict(grouped.proj.state_dict())
    x, positions = torch.randn(2, 5, 16), torch.arange(5)
    encoding = RotaryPositions(16, 4, WINDOW)
    out, weights = grouped(x, positions, encoding, need_weights=True)
    torch.testing.assert_close(out, plain(x, positions, encoding)[0])
    torch.testing.assert_close(grouped(x, positions, encoding)[0], out)  # explicit and fused paths agree
    assert weights.shape == (2, 4, 5, 5)


@torch.no_grad()
def test_a_sliding_window_is_the_explicit_mask():
    """Window W: query i sees keys i - W < j <= i (transformers' Mistral convention)."""
    torch.manual_seed(0)
    attention = CausalSelfAttention(16, 2, sliding_window=3).eval()
    x, positions = torch.randn(1, 7, 16), torch.arange(7)
    encoding = RotaryPositions(16, 2, WINDOW)
    out, weights = attention(x, positions, encoding, need_weights=True)
    i, j = positions[:, None], positions[None, :]
    assert torch.equal(weights[0, 0] > 0, (j <= i) & (j > i - 3))
    q, k, v = (t.view(1, 7, 2, 8).transpose(1, 2) for t in attention.qkv(x).split(16, dim=2))
    q, k = encoding.rotate(q, k, positions, positions)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=(j <= i) & (j > i - 3))
    torch.testing.assert_close(out, attention.proj(expected.transpose(1, 2).reshape(1, 7, 16)))
    torch.testing.assert_close(attention(x, positions, encoding)[0], out)


@torch.no_grad()
@pytest.mark.parametrize("residual", ["parallel", "parallel-shared-norm"])
def test_a_parallel_residual_adds_both_sublayers_to_the_input(residual):
    torch.manual_seed(0)
    block = PreNormBlock(16, 2, residual=residual).eval()
    x, positions, encoding = torch.randn(2, 5, 16), torch.arange(5), RotaryPositions(16, 2, WINDOW)
    norm2 = block.norm1 if residual == "parallel-shared-norm" else block.norm2
    expected = x + block.attention(block.norm1(x), positions, encoding)[0] + block.feed_forward(norm2(x))
    torch.testing.assert_close(block(x, positions, encoding)[0], expected)
    assert hasattr(block, "norm2") == (residual == "parallel")


@torch.no_grad()
@pytest.mark.parametrize("mlp, act", [("swiglu", F.silu), ("geglu", F.gelu)])
def test_a_gated_feed_forward_is_act_gate_times_up(mlp, act):
    torch.manual_seed(0)
    ff = FeedForward(16, 24, mlp=mlp, bias=False)
    assert ff.up.weight.shape == (48, 16)  # [gate; up]
    gate, up = ff.up.weight.split(24)
    x = torch.randn(2, 3, 16)
    torch.testing.assert_close(ff(x), (act(x @ gate.T) * (x @ up.T)) @ ff.down.weight.T)


def test_llama3_rope_frequencies_are_transformers():
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    scaling = {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_context_length": 64}
    config = LlamaConfig(
        hidden_size=256,
        num_attention_heads=4,
        rope_theta=500000.0,
        max_position_embeddings=2048,
        rope_scaling={
            "rope_type": "llama3",
            **{k: v for k, v in scaling.items() if k != "original_context_length"},
            "original_max_position_embeddings": 64,
        },
    )
    theirs, _ = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    ours = RotaryPositions(256, 4, 2048, base=500000.0, scaling={"kind": "llama3", **scaling}).frequencies
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=0)
    # the three bands are all there: kept, blended and slowed
    plain = RotaryPositions(256, 4, 2048, base=500000.0).frequencies
    assert (ours == plain).any() and (ours == plain / 32).any() and ((ours != plain) & (ours != plain / 32)).any()
    assert torch.equal(scaled_frequencies(plain, {"kind": "linear", "factor": 4.0}), plain / 4)


def test_a_rotary_fraction_rotates_only_the_first_channels():
    encoding = RotaryPositions(32, 2, WINDOW, fraction=0.25)  # 4 of each head's 16 channels
    q = torch.randn(1, 2, 5, 16)
    rotated, _ = encoding.rotate(q, q, torch.arange(5), torch.arange(5))
    assert torch.equal(rotated[..., 4:], q[..., 4:]) and not torch.equal(rotated[..., :4], q[..., :4])
    full = RotaryPositions(8, 2, WINDOW)  # the rotated part is a head of 4 rotated in full
    torch.testing.assert_close(
        rotated[..., :4], full.rotate(q[..., :4], q[..., :4], torch.arange(5), torch.arange(5))[0]
    )


def test_attention_bias_on_the_query_key_value_projection_only():
    attention = _model(layer_bias=False, attention_bias="qkv").blocks[0].attention
    assert attention.qkv.bias is not None and attention.proj.bias is None
    block = _model(layer_bias=False).blocks[0]
    assert block.attention.qkv.bias is None and block.feed_forward.up.bias is None


@torch.no_grad()
def test_learned_qk_norm_scales_each_head_channel():
    model = _model(qk_norm="rmsnorm", positions="rope", norm_eps=1e-6)
    attention = model.blocks[0].attention
    assert attention.q_norm.weight.shape == (8,) and attention.k_norm.eps == 1e-6
    unscaled = _model(qk_norm=True, positions="rope", norm_eps=1e-6)
    unscaled.load_state_dict({k: v for k, v in model.state_dict().items() if "_norm." not in k or "final" in k})
    ids = _ids()
    torch.testing.assert_close(model(ids)[0], unscaled(ids)[0], rtol=1e-5, atol=1e-5)  # scale 1: the same
    attention.q_norm.weight.fill_(2.0)
    assert not torch.allclose(model(ids)[0], unscaled(ids)[0])


@torch.no_grad()
def test_embedding_scale_multiplies_the_token_embeddings():
    scaled, plain = _model(embedding_scale=4.0), _model()
    seen = {}
    with hooks(scaled, {"embed": lambda a, n: seen.setdefault("scaled", a)}):
        scaled(_ids())
    with hooks(plain, {"embed": lambda a, n: seen.setdefault("plain", a)}):
        plain(_ids())
    assert torch.equal(seen["scaled"], seen["plain"] * 4.0)


def test_head_size_apart_from_the_width():
    attention = _model(d_model=16, n_head=2, head_size=12, positions="rope").blocks[0].attention
    assert attention.qkv.weight.shape == (3 * 24, 16) and attention.proj.weight.shape == (16, 24)


# --- parameters counted for the new layouts ---------------------------------------------


def test_parameters_are_counted_for_a_smollm2_shaped_layout():
    config = dict(
        vocab_size=50,
        context_length=16,
        d_model=24,
        n_layer=2,
        n_head=6,
        n_kv_head=2,
        d_ff=40,
        mlp="swiglu",
        norm="rmsnorm",
        positions="rope",
        layer_bias=False,
        bias=False,
        tie_embeddings=True,
    )
    counted, _ = measure_on_meta(lambda: build_transformer(dict(config), get_plugins().components))
    C, D, F_, L = 24, 4, 40, 2
    per_layer = C * (6 * D + 2 * 2 * D) + 6 * D * C + C * 2 * F_ + F_ * C + 2 * C  # qkv, proj, up, down, norms
    assert counted == 50 * C + L * per_layer + C


# --- refusals ------------------------------------------------------------------------------


class _ContractBlock(torch.nn.Module):
    """A third-party block written only against the documented contract (docs/plugins.md):
    its own residual arrangement and feed-forward, the zoo's attention handed
    positions, encoding and cache as received, everything else position by position."""

    def __init__(
        self, d_model: int, n_head: int, d_ff: int | None = None, dropout: float = 0.0, norm: str = "layernorm", **_
    ):
        super().__init__()
        self.norm = make_norm(norm, d_model)
        self.attention = CausalSelfAttention(d_model, n_head, dropout, n_kv_head=1)
        self.mix = torch.nn.Linear(d_model, d_model)

    def forward(self, x, positions, encoding, need_weights: bool = False, cache=None):
        update, weights = self.attention(self.norm(x), positions, encoding, need_weights, cache)
        return x + update + torch.tanh(self.mix(x)), weights


@pytest.fixture
def contract_block():
    """The zoo's components with the block registered as a plugin would, under "contract"."""
    blocks = Components("blocks")
    blocks.add("contract", _ContractBlock, "test")
    return {**get_plugins().components, "blocks": blocks}


def test_a_setting_the_model_does_not_know_is_refused():
    with pytest.raises(ZooError, match="architecture 'transformer': unknown config key\\(s\\) n_kv_heads$"):
        build_transformer(
            {"vocab_size": 8, "context_length": 4, "d_model": 8, "n_layer": 1, "n_head": 2, "n_kv_heads": 1},
            get_plugins().components,
        )


def test_a_setting_the_block_does_not_name_is_refused(contract_block):
    with pytest.raises(ZooError, match="^block 'contract' does not take the setting\\(s\\) qk_norm$"):
        TransformerLanguageModel(8, 4, 8, 1, 2, components=contract_block, block="contract", qk_norm=True)
    with pytest.raises(ValueError, match="PostNormBlock takes residual 'sequential', not 'parallel'"):
        _model(block="post-norm", residual="parallel")


@pytest.mark.parametrize(
    "setting", [{"rope_base": 500000.0}, {"rotary_fraction": 0.5}, {"rope_scaling": {"kind": "linear", "factor": 2.0}}]
)
def test_a_rope_setting_without_rope_is_refused(setting):
    with pytest.raises(ZooError, match=f"^positions 'learned' does not take the setting\\(s\\) {next(iter(setting))}$"):
        _model(**setting)


def test_a_card_with_a_setting_its_encoding_does_not_take_is_refused_by_the_cli(zoo, tmp_path, use_registry):
    use_registry(hostile_variant(tmp_path / "catalogue", "layout", config__rope_base=500000.0))
    result = zoo("load", "layout")
    assert result.code == 1 and result.err.count("\n") == 1, result.err
    assert "positions 'learned' does not take the setting(s) rope_base" in result.err


def test_an_older_card_says_activation_and_reads_as_mlp():
    data = card_data()
    data["config"]["activation"] = "gelu"
    assert ModelCard.model_validate(data).config["mlp"] == "gelu"
    assert "activation" not in ModelCard.model_validate(data).config
    data["config"]["mlp"] = "relu"
    with pytest.raises(ValueError, match="sets both 'activation' and 'mlp'"):
        ModelCard.model_validate(data)


# --- a block of the contract gets the cache and the row batch ------------------------------


@torch.inference_mode()
def test_a_block_of_the_contract_samples_through_the_cache_and_the_row_batch(contract_block):
    torch.manual_seed(0)
    model = TransformerLanguageModel(
        VOCAB, WINDOW, 16, 2, 4, components=contract_block, block="contract", positions="rope"
    ).eval()
    assert model.supports_kv_cache
    prompt = torch.tensor([[3, 1, 4]])
    cached = sample_tokens(model, prompt, 8, generator=torch.Generator().manual_seed(5))
    assert torch.equal(
        cached, sample_tokens(model, prompt, 8, generator=torch.Generator().manual_seed(5), use_cache=False)
    )
    # greedy rows of different lengths through one row batch: each its own uncached forward's tokens
    prompts = [[3, 1, 4], [1, 5], [9, 2, 6, 5, 3]]
    batch = model.make_row_batch(len(prompts))
    rows = {}
    for row, ids in enumerate(prompts):
        cache = model.make_cache()
        logits, _ = model(torch.tensor([ids]), cache=cache)
        assert batch.accepts(model, cache)
        batch.add(row, cache)
        rows[row] = ids + [int(logits[0, -1].argmax())]
    for _ in range(4):
        logits = batch.step([rows[row][-1] for row in batch.rows])
        for row, row_logits in zip(batch.rows, logits):
            rows[row].append(int(row_logits.argmax()))
    for row, ids in enumerate(prompts):
        expected = list(ids)
        while len(expected) < len(rows[row]):
            expected.append(int(model(torch.tensor([expected]))[0][0, -1].argmax()))
        assert rows[row] == expected
    assert math.isfinite(float(logits.sum()))
