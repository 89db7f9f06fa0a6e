"""benchmarks/bench_quant_quality.py's pieces compute what its table claims.

A tiny Llama written by gguf's writer (tests/gguf_support.py, Q8_0 matrices like a
real quantised file) is imported float32 (`zoo import gguf --dequantize`: the
reference) and `zoo quantize`d to Q4_0. Checked: the perplexity is exp of the mean
negative log-likelihood the zoo's own scoring reports; KL of a model with itself is
0, of the quantised one positive and finite; reading through the KV cache a few
tokens at a time gives the at-once distributions; the GGUF file the benchmark writes
for llama.cpp holds exactly the blocks `zoo quantize` made; and llama.cpp's
log-probabilities (node-llama-cpp) of a float32 file are the zoo's.
"""

from __future__ import annotations

import math
import os
from unittest import mock

import gguf
import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the interop extra is not installed")

from benchmarks import bench_quant_quality as bench  # noqa: E402
from zoo_core import cli  # noqa: E402
from zoo_core.evaluation.bits import network_bits_per_byte  # noqa: E402
from zoo_core.loading.api import load  # noqa: E402

from .gguf_support import Q, tiny_tokenizer, write_gguf  # noqa: E402
from .references import reference  # noqa: E402

VOCAB = 299
TEXT = "the quick brown fox jumps over the lazy dog on the corner of two streets " * 3


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny file, its float32 import and its Q4_0 quantisation, loaded."""
    folder = tmp_path_factory.mktemp("quant-quality")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        rms_norm_eps=1e-5,
        initializer_range=0.1,
        rope_theta=10000.0,
        tie_word_embeddings=True,
    )
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    path = folder / "tiny.gguf"
    bos = {"tokenizer.ggml.add_bos_token": (True, gguf.GGUFValueType.BOOL)}  # SmolLM2's windows start with one
    write_gguf(path, model, [Q.Q8_0], tiny_tokenizer(VOCAB), metadata=bos)
    home = {"ZOO_HOME": str(folder / "home"), "ZOO_CACHE": str(folder / "cache")}
    with mock.patch.dict(os.environ, home):
        assert cli.main(["import", "gguf", str(path), "--name", "tiny-f32", "--dequantize"]) == 0
        assert cli.main(["quantize", "tiny-f32", "--to", "q4_0", "--name", "tiny-q4-0"]) == 0
        full, quantised = load("tiny-f32"), load("tiny-q4-0")
    assert full.card.tokenizer.bos_id == 1
    window = bench.text_windows(full.tokenizer, full.card.tokenizer.bos_id, TEXT, 2, 40)[0]
    return {"file": path, "folder": folder, "home": home, "full": full, "quantised": quantised, "window": window}


def test_perplexity_is_exp_of_the_zoo_evals_mean_nll(tiny):
    full, window = tiny["full"], tiny["window"]
    text = full.tokenizer.decode(window[1:])
    assert full.tokenizer.encode(text) == window[1:]  # the same ids either way
    scored = network_bits_per_byte(full.network, full.tokenizer, 128, text, "", bos_id=full.card.tokenizer.bos_id)
    nlls = bench.negative_log_likelihoods(bench.log_probs_at_once(full.network, window), window)
    assert scored["tokens"] == len(nlls) == len(window) - 1
    assert bench.perplexity(nlls) == pytest.approx(math.exp(scored["nats_per_token"]), rel=1e-6)


def test_kl_is_zero_for_itself_and_positive_for_the_quantised(tiny):
    window = tiny["window"]
    expected = bench.log_probs_at_once(tiny["full"].network, window)
    itself = bench.kl_divergences(expected, bench.log_probs_at_once(tiny["full"].network, window))
    assert torch.equal(itself, torch.zeros_like(itself))
    quantised = bench.kl_divergences(expected, bench.log_probs_at_once(tiny["quantised"].network, window))
    assert torch.isfinite(quantised).all() and (quantised >= -1e-12).all() and quantised.mean() > 1e-6


def test_reading_through_the_cache_gives_the_at_once_distributions(tiny):
    window = tiny["window"]
    expected = bench.log_probs_at_once(tiny["full"].network, window)
    float_stepped = bench.log_probs_stepped(tiny["full"].network, window, 8)
    assert float_stepped.shape == expected.shape
    assert bench.kl_divergences(expected, float_stepped).abs().max() < 1e-6  # float32: the order of additions
    # packed: the C kernel, whatever activation rounding it does, adds far less than the Q4_0 weights' error
    once = bench.log_probs_at_once(tiny["quantised"].network, window)
    stepped = bench.log_probs_stepped(tiny["quantised"].network, window, 8)
    added = bench.kl_divergences(once, stepped).mean()
    assert torch.isfinite(added) and added < 0.1 * bench.kl_divergences(expected, once).mean()


def test_the_gguf_for_llama_cpp_holds_zoo_quantize_blocks(tiny):
    rewritten = tiny["folder"] / "tiny-q4-0.gguf"
    bench.write_gguf_as(tiny["file"], rewritten, Q.Q4_0)
    kinds = {t.name: t.tensor_type for t in gguf.GGUFReader(rewritten).tensors}
    assert {kind for name, kind in kinds.items() if name.endswith("norm.weight")} == {Q.F32}
    with mock.patch.dict(os.environ, tiny["home"]):
        assert cli.main(["import", "gguf", str(rewritten), "--name", "tiny-q4-0-file"]) == 0
        imported = load("tiny-q4-0-file").network.state_dict()
    made = tiny["quantised"].network.state_dict()
    assert imported.keys() == made.keys()
    for name, tensor in made.items():  # the same bytes, row for row (llama.cpp's Q/K row order undone)
        assert torch.equal(imported[name], tensor), name


def test_llama_cpp_log_probs_of_a_float32_file_are_the_zoos(tiny):
    reference("node-llama-cpp/node_modules")
    as_f32 = tiny["folder"] / "tiny-f32.gguf"
    bench.write_gguf_as(tiny["file"], as_f32, Q.F32)
    windows = bench.text_windows(tiny["full"].tokenizer, tiny["full"].card.tokenizer.bos_id, TEXT, 2, 40)
    found = bench.llama_cpp_log_probs(as_f32, windows, 1, tiny["folder"])
    for window, log_probs, top in zip(windows, found["log_probs"], found["top"]):
        expected = bench.log_probs_at_once(tiny["full"].network, window)
        nlls = bench.negative_log_likelihoods(expected, window)
        # llama.cpp keeps its KV cache in F16 by default: thousandths of a nat apart, not more
        assert torch.allclose(-torch.tensor(log_probs, dtype=torch.float64), nlls, atol=1e-2)
        assert bench.perplexity(-torch.tensor(log_probs)) == pytest.approx(bench.perplexity(nlls), rel=1e-3)
        assert top == expected.argmax(-1).tolist()
