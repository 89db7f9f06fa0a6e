"""Seed 004: character tokenizer, the GPT architecture, RoPE and RMSNorm, cached sampling."""

from __future__ import annotations

import pytest
import torch

from zoo_core.errors import ZooError
from zoo_core.inference.sampling import sample_tokens
from zoo_core.plugin_api.manager import get_plugins
from zoo_plugins.chars.tokenizer import CharTokenizer
from zoo_plugins.positions.rope import RotaryPositions

from .conftest import ROOT


@pytest.fixture(scope="module")
def chars():
    return CharTokenizer.from_file(ROOT / "checkpoints" / "char-65.json")


def test_character_vocabulary_is_the_corpus_65(chars):
    text = (ROOT / "data" / "tinyshakespeare.txt").read_text()
    assert chars.characters == sorted(set(text)) and chars.vocab_size == 65
    assert chars.decode(chars.encode("ROMEO:\nO, she doth teach the torches!")) == "ROMEO:\nO, she doth teach the torches!"


def test_unknown_characters_are_named_or_replaced(chars):
    with pytest.raises(ZooError, match=r"2 character\(s\) not in the vocabulary: 'é', '✓'"):
        chars.encode("café ✓")
    assert chars.decode(chars.encode("café", errors="replace")) == "caf?"


def test_damaged_character_file(tmp_path):
    bad = tmp_path / "c.json"
    bad.write_text('{"characters": ["a", "a"]}')
    with pytest.raises(ZooError, match="a character appears twice"):
        CharTokenizer.from_file(bad)
    bad.write_text("{")
    with pytest.raises(ZooError, match="damaged tokenizer file"):
        CharTokenizer.from_file(bad)


def test_rope_scores_depend_on_distance_only():
    torch.manual_seed(0)
    rope = RotaryPositions(d_model=16, n_head=2)
    q, k = torch.randn(1, 2, 1, 8), torch.randn(1, 2, 1, 8)

    def score(m, n):
        rq, rk = rope.rotate(q, k, torch.tensor([m]), torch.tensor([n]))
        return (rq * rk).sum().item()

    assert score(5, 2) == pytest.approx(score(103, 100), abs=1e-4)
    assert score(5, 2) != pytest.approx(score(5, 4), abs=1e-3)
    rotated, _ = rope.rotate(q, k, torch.tensor([7]), torch.tensor([7]))
    assert rotated.norm().item() == pytest.approx(q.norm().item(), rel=1e-5)  # a rotation keeps lengths


def _gpt(**config):
    components = get_plugins().components
    full = {"vocab_size": 65, "context_length": 16, "d_model": 32, "n_layer": 3, "n_head": 4, "dropout": 0.0, **config}
    torch.manual_seed(0)
    return components["models"].create("gpt", full, components).eval()


def test_gpt_defaults_follow_seed_004():
    model = _gpt(dropout=0.2)
    assert type(model.positions).__name__ == "LearnedPositions"
    assert all(type(b).__name__ == "PreNormBlock" for b in model.blocks)
    assert model.blocks[0].attention.dropout == 0.2
    idx = torch.randint(0, 65, (2, 16))
    logits, loss = model(idx, idx)
    assert logits.shape == (2, 16, 65) and loss.item() == pytest.approx(4.17, abs=0.2)  # ~ln 65 at initialisation


def test_rope_rmsnorm_variant_builds_from_registered_parts():
    model = _gpt(positions="rope", norm="rmsnorm")
    assert isinstance(model.blocks[0].norm1, torch.nn.RMSNorm) and isinstance(model.final_norm, torch.nn.RMSNorm)
    assert not any("positions" in name for name, _ in model.named_parameters())  # RoPE has nothing to train


@pytest.mark.parametrize("positions", ["rope", "learned", "sinusoidal"])
def test_cached_sampling_matches_uncached_past_the_window(positions):
    model = _gpt(positions=positions)
    prompts = torch.randint(0, 65, (3, 5))
    kwargs = dict(max_new_tokens=40, temperature=1.3, top_k=20)  # 45 tokens through a window of 16
    cached = sample_tokens(model, prompts, generator=torch.Generator().manual_seed(4), use_cache=True, **kwargs)
    plain = sample_tokens(model, prompts, generator=torch.Generator().manual_seed(4), use_cache=False, **kwargs)
    assert torch.equal(cached, plain)


def test_a_block_without_cache_support_samples_uncached():
    from zoo_core import hookimpl
    from zoo_core.plugin_api.manager import PluginInfo, PluginSet
    from zoo_plugins.blocks.blocks import PreNormBlock

    class BlockWithoutCache(PreNormBlock):  # written to the interface before caching existed
        def forward(self, x, positions, encoding, need_weights=False):
            return super().forward(x, positions, encoding, need_weights)

    class OldPlugin:
        @hookimpl
        def register_blocks(register):
            register("old-block", BlockWithoutCache)

    plugins = PluginSet()
    plugins.components = {**get_plugins().components, "blocks": plugins.components["blocks"]}
    plugins.add_plugin(OldPlugin, PluginInfo("old", "old", "1", False))
    config = {"vocab_size": 65, "context_length": 8, "d_model": 16, "n_layer": 2, "n_head": 2, "block": "old-block"}
    model = plugins.components["models"].create("gpt", config, plugins.components).eval()
    assert model.supports_kv_cache is False
    out = sample_tokens(model, torch.zeros(1, 1, dtype=torch.long), 12, generator=torch.Generator().manual_seed(0))
    assert out.shape == (1, 13)


def test_unpublished_variant_says_how_to_get_weights(zoo):
    result = zoo("load", "gpt-char")
    assert result.code == 1
    assert "gpt-char.safetensors: checkpoint file not found; variant 'gpt-char' has no published weights yet" in result.err
    assert "zoo train gpt-char --publish" in result.err
