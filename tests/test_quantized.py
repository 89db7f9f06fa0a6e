"""GGUF weights kept as the file gives them (zoo_core.loading.packed_modules).

Real GGUF files written by llama.cpp's own `gguf` writer (tests/gguf_support.py),
imported twice: with their quantised blocks kept (the default) and with
``--dequantize`` (float32). Reading many tokens at once, the packed network
dequantises each weight to the very float32 values of the float import and
multiplies with the same `F.linear`: the logits are equal bit for bit (bound
zero). Up to MAX_TOKENS rows go through the C kernel, which rounds each
activation row per block of 32 to 8-bit integers (scale da = max|x| / 127) and
multiplies the file's integers by them: the only error added is that rounding,
each activation within da / 2, so each output within Σ_blocks da/2 · Σ|w| of
the float product, plus float32 reordering's n·eps·Σ|w·x| (n the row's length,
eps 2^-24). Also: blocks equal to the file's bytes,
the tied head stored once, the second load memory-mapped, a corrupted packed
checkpoint refused in one line.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the interop extra is not installed")

from zoo_core.loading import ggml_kernels  # noqa: E402
from zoo_core.loading.api import get_variant, load  # noqa: E402
from zoo_core.loading.ggml_blocks import PACKED_TYPES, dequantize_rows  # noqa: E402
from zoo_core.loading.packed_modules import PACKED_KEY, PackedEmbedding, PackedLinear, TiedPackedHead  # noqa: E402
from zoo_core.storage.checkpoints import read_header  # noqa: E402

from .gguf_support import Q, stored, tiny_tokenizer, write_gguf  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
VOCAB = 299
KEPT = [Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.Q2_K, Q.Q3_K]
# The file's matrices in turn: the embedding (tied to the head); then per layer query, key,
# value (joined into one matrix by the zoo), output, gate and up (joined), down.
MATRICES = [Q.Q8_0]
MATRICES += [Q.Q4_0] * 3 + [Q.Q4_1] + [Q.Q5_0] * 2 + [Q.Q5_1]
MATRICES += [Q.Q4_K] * 3 + [Q.Q5_K] + [Q.Q6_K] * 2 + [Q.Q2_K]
MATRICES += [Q.Q3_K] * 3 + [Q.Q8_0] + [Q.Q4_0, Q.Q8_0] + [Q.Q8_0]  # gate and up of two types: float32
TINY = dict(
    vocab_size=VOCAB,
    hidden_size=256,
    intermediate_size=256,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    rms_norm_eps=1e-5,
    initializer_range=0.05,
    bos_token_id=None,
    eos_token_id=None,
    pad_token_id=None,
    tie_word_embeddings=True,
)


@pytest.mark.parametrize("kind", sorted(PACKED_TYPES))
def test_blocks_read_as_the_package_dequantises_them(kind):
    values = np.random.default_rng(0).standard_normal((5, 512)).astype(np.float32)
    blocks = stored(values, kind, seed=1)
    expected = gguf.quants.dequantize(blocks, kind)
    got = dequantize_rows(torch.from_numpy(blocks), kind).numpy()
    assert np.array_equal(got.view(np.uint32), expected.view(np.uint32))  # bit for bit, not close


@pytest.fixture(scope="module")
def tiny_file(tmp_path_factory):
    """One file with matrices of every kept type (`MATRICES`)."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**TINY, rope_theta=50000.0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_gguf(path, model, MATRICES, tiny_tokenizer(VOCAB), name="Tiny Packed")
    return path


def test_packed_import_decodes_as_the_float_import(zoo, tiny_file):
    assert zoo("import", "gguf", str(tiny_file), "--name", "packed").code == 0
    assert zoo("import", "gguf", str(tiny_file), "--name", "float", "--dequantize").code == 0
    packed, full = load("packed"), load("float")
    header = read_header(packed.verification.path)
    types = json.loads(header["__metadata__"][PACKED_KEY])
    assert set(types.values()) == {kind.name for kind in KEPT}
    assert "lm_head.weight" not in header  # the tied head is the embedding, stored once
    assert isinstance(packed.network.token_embedding, PackedEmbedding)
    assert isinstance(packed.network.lm_head, TiedPackedHead)
    assert sum(isinstance(m, PackedLinear) for m in packed.network.modules()) == 3 * 4 - 1  # qkv, proj, up, down
    assert packed.network.blocks[2].feed_forward.up.weight.dtype == torch.float32  # Q4_0 and Q8_0 rows joined
    assert packed.card.parameters == full.card.parameters
    # every packed weight dequantises to the float import's values, bit for bit
    floats = full.network.state_dict()
    for name, kind in types.items():
        weight = packed.network.get_submodule(name.rpartition(".")[0]).weight
        assert torch.equal(dequantize_rows(weight, gguf.GGMLQuantizationType[kind]), floats[name]), name
    ids = torch.tensor([[5, 17, 200, 3, 42, 298, 7, 9, 11, 100, 150, 250] * 3])  # past MAX_TOKENS: dequantised, BLAS
    assert ids.shape[1] > ggml_kernels.MAX_TOKENS
    with torch.no_grad():
        assert torch.equal(packed.network(ids)[0], full.network(ids)[0])  # bound: zero (see the module's docstring)
        one, reference = packed.network(ids[:, :1])[0], full.network(ids[:, :1])[0]
    # through the kernel: activations rounded to 8 bits at every product (each within max|x|/254 per 32
    # values); measured 3.6e-3 of the largest logit on this tiny random network, bound set at 1e-2
    assert torch.allclose(one, reference, rtol=0, atol=1e-2 * reference.abs().max().item())


@pytest.mark.parametrize("kind", [Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q4_K, Q.Q5_K, Q.Q6_K])
def test_kernel_is_the_float_product_up_to_activation_rounding(kind):
    assert ggml_kernels._library() is not None, "no C compiler: the packed layers fall back to dequantising"
    assert int(kind) in ggml_kernels.KERNEL_TYPES
    generator = np.random.default_rng(3)
    rows = torch.from_numpy(stored(generator.standard_normal((97, 768)).astype(np.float32), kind, seed=0))
    weight = dequantize_rows(rows, kind)
    threads = torch.get_num_threads()
    try:
        for count, tokens in ((1, 1), (2, 3), (1, 19), (1, ggml_kernels.MAX_TOKENS), (2, ggml_kernels.MAX_TOKENS)):
            torch.set_num_threads(count)  # the rows split between threads: each row's sum is one thread's
            x = torch.from_numpy(generator.standard_normal((tokens, 768)).astype(np.float32))
            got = ggml_kernels.matvec(rows, int(kind), x)
            # each activation within half its block's step (max|x| / 127) of its rounded value
            step = x.reshape(tokens, -1, 32).abs().amax(-1, keepdim=True).expand(-1, -1, 32).reshape(tokens, -1) / 127
            rounding = (step / 2) @ weight.abs().T
            reordering = 768 * 2.0**-24 * ((x.abs() + step) @ weight.abs().T)
            assert got is not None and ((got - x @ weight.T).abs() <= rounding + reordering).all(), (count, tokens)
            assert (got - x @ weight.T).abs().max() > 0  # the rounding is there: the bound is the one that matters
    finally:
        torch.set_num_threads(threads)


def test_second_load_maps_the_file(zoo, tiny_file):
    assert zoo("import", "gguf", str(tiny_file), "--name", "mapped").code == 0
    first = load("mapped")  # verifies every byte and value
    verified = zoo("verify", "mapped")  # streamed, on a network built on the meta device
    assert verified.code == 0, verified.err
    second = load("mapped")
    assert not first.verification.verified_before and second.verification.verified_before
    path = str(get_variant("mapped").checkpoint_path.resolve())
    spans = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            if line.rstrip().endswith(path):
                low, high = (int(x, 16) for x in line.split()[0].split("-"))
                spans.append((low, high))
    for module in second.network.modules():
        if isinstance(module, (PackedLinear, PackedEmbedding)):
            pointer = module.weight.data_ptr()
            assert any(low <= pointer < high for low, high in spans), "a packed weight was copied, not mapped"


def test_corrupted_packed_checkpoint_is_refused_in_one_line(zoo, tiny_file):
    assert zoo("import", "gguf", str(tiny_file), "--name", "broken").code == 0
    path = get_variant("broken").checkpoint_path
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF  # inside the last tensor's blocks
    path.write_bytes(bytes(data))
    result = zoo("sample", "broken", "--prompt", "the", "--max-new-tokens", "2")
    assert result.code == 1
    assert result.err.count("\n") == 1 and "sha256 mismatch" in result.err


@pytest.mark.slow
@pytest.mark.smollm2
def test_smollm2_packed_as_docs_say(zoo, monkeypatch, smollm2_home):
    """docs/interop.md's packed import of SmolLM2-135M-Instruct Q4_1 (the
    checkpoint within 1.1x the file, every matrix packed) and `zoo quantize` of
    the shared float32 import to Q8_0: both say " Paris" greedily."""
    monkeypatch.setenv("ZOO_REGISTRY", str(smollm2_home / "registry.toml"))  # its float32 import, read only
    from .references import SMOLLM2, reference

    source = reference(SMOLLM2)
    section = (ROOT / "docs" / "interop.md").read_text(encoding="utf-8").split("### Quantised weights kept")[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    commands = [shlex.split(line) for line in block.splitlines() if line.startswith("zoo ")]
    assert commands[0][:3] == ["zoo", "import", "gguf"] and commands[0][3] == SMOLLM2
    commands[0][3] = str(source)
    for command in commands:
        result = zoo(*command[1:])
        assert result.code == 0, result.err
        if command[1] == "sample":
            assert result.out.startswith("The capital of France is Paris")
    variant = get_variant(commands[0][5])
    assert variant.checkpoint_path.stat().st_size <= 1.1 * source.stat().st_size
    types = json.loads(read_header(variant.checkpoint_path)["__metadata__"][PACKED_KEY])
    assert len(types) == 1 + 30 * 4 and set(types.values()) == {"Q4_1", "Q8_0"}  # embedding + 4 per layer


def test_zoo_quantize_round_trip(zoo, tiny_file):
    """A float import quantised once to Q8_0: saved packed, loaded packed, its
    blocks the gguf package's quantisation of the float weights."""
    assert zoo("import", "gguf", str(tiny_file), "--name", "float32", "--dequantize").code == 0
    result = zoo("quantize", "float32", "--to", "q8_0", "--name", "float32-q8")
    assert result.code == 0, result.err
    full, packed = load("float32"), load("float32-q8")
    assert isinstance(packed.network.lm_head, TiedPackedHead)
    header = read_header(packed.verification.path)
    assert "lm_head.weight" not in header
    qkv = packed.network.blocks[0].attention.qkv
    assert isinstance(qkv, PackedLinear)
    expected = gguf.quants.quantize(full.network.blocks[0].attention.qkv.weight.detach().numpy(), Q.Q8_0)
    assert np.array_equal(qkv.weight.numpy(), expected)
    assert packed.card.parameters == full.card.parameters
    assert packed.generate("the quick", max_new_tokens=4, seed=0)  # runs through the kernel
    again = zoo("quantize", "float32-q8", "--to", "q4_0", "--name", "twice")
    assert again.code == 1 and "quantised already" in again.err and again.err.count("\n") == 1


def test_training_and_exports_ask_for_float_weights(zoo, tiny_file, tmp_path):
    assert zoo("import", "gguf", str(tiny_file), "--name", "frozen").code == 0
    for args in (
        ("export", "frozen", "--format", "gguf", "--out", str(tmp_path / "out")),
        ("train", "frozen-lora", "--from", "frozen", "--trainer", "lora"),
    ):
        result = zoo(*args)
        assert result.code == 1 and result.err.count("\n") == 1, result.err
        assert "zoo import gguf --dequantize" in result.err
    assert not (tmp_path / "out").exists()
