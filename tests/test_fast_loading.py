"""Loading for speed: `--quantize int8`, and a checkpoint verified once then memory-mapped."""

from __future__ import annotations

import os

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

import zoo_core
from zoo_core.inference.sampling import sample_tokens
from zoo_core.loading.packed_modules import PackedLinear
from zoo_core.storage.checkpoints import adopt_mapped
from zoo_core.web.generation import ModelCache

PROMPT = "ROMEO: What say you, my lord? Speak, for the night is long and"
# The stated bound of int8 against float32 on gpt-char-mini: the next-token
# distributions differ by under 0.01 nats (KL) at every position (measured:
# 0.0016 at most, 0.0003 on average) and the most likely token is the same.
KL_BOUND = 0.01


def _log_probabilities(model, text: str) -> torch.Tensor:
    ids = torch.tensor([model.tokenizer.encode(text)])
    with torch.inference_mode():
        return torch.log_softmax(model.network(ids)[0][0], dim=-1)


def test_int8_logits_stay_within_the_bound_of_float32():
    full, int8 = zoo_core.load("gpt-char-mini"), zoo_core.load("gpt-char-mini", quantize="int8")
    qkv = int8.network.blocks[0].attention.qkv  # llama.cpp's Q8_0 blocks through the C kernel, not torch.ao
    assert isinstance(qkv, PackedLinear) and qkv.kind.name == "Q8_0" and qkv.weight.dtype == torch.uint8
    assert "quantized int8 after the checks" in int8.verification.checks
    expected, found = _log_probabilities(full, PROMPT), _log_probabilities(int8, PROMPT)
    kl = (expected.exp() * (expected - found)).sum(dim=-1)
    assert float(kl.max()) < KL_BOUND
    assert torch.equal(expected.argmax(dim=-1), found.argmax(dim=-1))
    assert not torch.equal(expected, found)  # the weights really are other numbers


def test_int8_samples_through_the_cache_and_the_server_batches():
    int8 = ModelCache(quantize="int8").get("gpt-char-mini")
    ids = torch.tensor([int8.tokenizer.encode("ROMEO:")])
    cached = sample_tokens(int8.network, ids, 8, temperature=0)
    assert torch.equal(cached, sample_tokens(int8.network, ids, 8, temperature=0, use_cache=False))
    with torch.inference_mode():  # a row batch steps the quantized head, whose weight is a method
        cache = int8.network.make_cache()
        int8.network(ids, cache=cache)
        batch = int8.network.make_row_batch(2)
        batch.add("row", cache)
        assert batch.step([int(cached[0, ids.shape[1]])]).argmax(dim=-1).item() == int(cached[0, ids.shape[1] + 1])


def test_zoo_sample_with_int8(zoo):
    result = zoo("sample", "gpt-char-mini", "--quantize", "int8", "--prompt", "ROMEO:", "--max-new-tokens", "5")
    assert result.code == 0 and result.out.startswith("ROMEO:"), result.err


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (
            ("sample", "puzzle-disobeys", "--prompt", "a"),
            "variant 'puzzle-disobeys' has no linear layers for --quantize",
        ),
        (("eval", "gpt-char-mini", "--dtype", "bfloat16"), "quantizes float32 weights; drop --dtype or --quantize"),
    ],
)
def test_int8_refused_in_one_line_where_it_cannot_apply(zoo, args, fragment):
    result = zoo(*args, "--quantize", "int8")
    assert result.code != 0 and fragment in result.err and result.err.count("\n") == 1, result.err


def test_a_second_load_maps_the_file_verified_before(private_catalogue):
    first = zoo_core.load("gpt-char-mini")
    second = zoo_core.load("gpt-char-mini")
    assert (first.verification.verified_before, second.verification.verified_before) == (False, True)
    assert second.verification.checks == first.verification.checks
    assert torch.equal(_log_probabilities(first, PROMPT), _log_probabilities(second, PROMPT))


def test_a_file_changed_after_its_verification_is_checked_in_full_again(zoo, private_catalogue):
    zoo_core.load("gpt-char-mini")
    path = private_catalogue.parent / "checkpoints" / "gpt-char-mini.safetensors"
    info = os.stat(path)
    data = bytearray(path.read_bytes())
    data[-1] ^= 1  # one bit of the last weight, written in place: same inode, same size
    path.write_bytes(bytes(data))
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))  # the modification time put back too
    refused = zoo("load", "gpt-char-mini")
    assert refused.code != 0 and "sha256 mismatch" in refused.err and refused.err.count("\n") == 1


def test_mapped_tensors_become_the_parameters_and_tied_ones_stay_tied(tmp_path):
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(5, 3)
            self.head = nn.Linear(3, 5, bias=False)
            self.head.weight = self.embedding.weight

    source = Tied()
    save_file({name: tensor.clone() for name, tensor in source.state_dict().items()}, tmp_path / "tied.safetensors")
    model = Tied()
    adopt_mapped(model, load_file(tmp_path / "tied.safetensors"))
    assert model.head.weight is model.embedding.weight
    assert torch.equal(model.embedding.weight, source.embedding.weight)
    assert [name for name, _ in model.named_parameters()] == ["embedding.weight"]


def _counting_builds(monkeypatch):
    """A fresh plugin set whose transformer factory records, on each call, where a
    large tensor made then goes: "meta" while the budget check counts the network
    (zoo_core.loading.sizing builds it with its large tensors there), else "cpu"."""
    from zoo_core.loading.sizing import SMALL_ELEMENTS
    from zoo_core.plugin_api.manager import PluginSet
    from zoo_plugins.models import transformer

    builds: list[str] = []
    build = transformer.build_transformer

    def counting(config, components):
        builds.append(torch.empty(SMALL_ELEMENTS + 1).device.type)
        return build(config, components)

    # The registration names "module:attribute", imported on first use: a fresh set finds this one.
    monkeypatch.setattr(transformer, "build_transformer", counting)
    plugins = PluginSet()
    plugins.load_entry_points()
    return builds, plugins


def test_a_load_builds_the_network_once_on_meta_and_once_for_real(monkeypatch):
    builds, plugins = _counting_builds(monkeypatch)
    model = zoo_core.load("transformer-1b-learned-ctx8", plugins)
    assert builds == ["meta", "cpu"]
    assert model.verification.checks  # loaded and verified, with the one real network


def test_verifying_a_variant_builds_it_once_on_meta_and_not_for_real(monkeypatch):
    from zoo_core.loading.api import verify_variant_files

    builds, plugins = _counting_builds(monkeypatch)
    verify_variant_files(zoo_core.get_variant("transformer-1b-learned-ctx8"), plugins)
    assert builds == ["meta"]
