"""`zoo import gguf` on tiny GGUF files written by llama.cpp's own `gguf` package
(tests/gguf_support.py): every type the importer claims, in one file as real
files mix them, read as the package's `gguf.quants.dequantize` reads it, with
logits equal to transformers' on the same values and to `zoo import hf`'s; and
hostile files refused in one line, with nothing allocated or left behind."""

from __future__ import annotations

import math
import struct
import tracemalloc

import gguf
import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the interop extra is not installed")

from zoo_core.loading.api import load  # noqa: E402

from .gguf_support import (  # noqa: E402
    CHAT_TEMPLATE,
    EVERY_TYPE,
    IQ_TYPES,
    Q,
    dequantised_model,
    tiny_tokenizer,
    write_gguf,
)

VOCAB = 299  # odd: no block or tile size divides it
TOLERANCE = 1e-4
PROMPTS = ["the quick brown fox jumps over", "a library on the corner"]
# The K-quants' 256-value blocks need rows of 256; heads of 64, two key/value heads for four queries.
TINY = dict(
    vocab_size=VOCAB,
    hidden_size=256,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    rms_norm_eps=1e-5,
    initializer_range=0.05,
    bos_token_id=None,
    eos_token_id=None,
    pad_token_id=None,
)


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer(VOCAB)


def tiny_model(kind="LlamaConfig", **fields):
    torch.manual_seed(0)
    config = getattr(transformers, kind)(**{**TINY, **fields})
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def logits(network_or_model, tokenizer, prompt):
    ids = torch.tensor([tokenizer.encode(prompt).ids])
    with torch.no_grad():
        out = network_or_model(ids)
    return out.logits if hasattr(out, "logits") else out[0]


def test_every_type_reads_as_the_package_dequantises_it(zoo, tmp_path, tokenizer):
    """One file holding every claimed type (13 matrices, 13 types): the zoo's
    tensors are the package's dequantised values (the query and key rows as the
    file stores them, llama.cpp's pair order being the zoo's), and the logits
    equal transformers' on those values."""
    model = tiny_model(rope_theta=50000.0)
    path = tmp_path / "tiny.gguf"
    held = write_gguf(path, model, EVERY_TYPE, tokenizer)
    assert {gguf.GGUFReader(path).tensors[i].tensor_type for i in range(len(held))} >= set(EVERY_TYPE)

    result = zoo("import", "gguf", str(path), "--dequantize")  # the name from general.name "Tiny Llama 1.0"
    assert result.code == 0, result.err
    assert result.out.startswith("tiny-llama-1.0: ")
    imported = load("tiny-llama-1.0")
    state = imported.network.state_dict()
    for i in range(2):
        qkv = state[f"blocks.{i}.attention.qkv.weight"].numpy()
        stored = np.concatenate([held[f"blk.{i}.attn_{p}.weight"] for p in "qkv"])
        np.testing.assert_array_equal(qkv, stored)
        up = state[f"blocks.{i}.feed_forward.up.weight"].numpy()
        np.testing.assert_array_equal(
            up, np.concatenate([held[f"blk.{i}.ffn_gate.weight"], held[f"blk.{i}.ffn_up.weight"]])
        )
        np.testing.assert_array_equal(
            state[f"blocks.{i}.feed_forward.down.weight"].numpy(), held[f"blk.{i}.ffn_down.weight"]
        )
        np.testing.assert_array_equal(
            state[f"blocks.{i}.attention.proj.weight"].numpy(), held[f"blk.{i}.attn_output.weight"]
        )
    np.testing.assert_array_equal(state["token_embedding.weight"].numpy(), held["token_embd.weight"])
    np.testing.assert_array_equal(state["lm_head.weight"].numpy(), held["output.weight"])

    reference = dequantised_model(model, held)
    for prompt in PROMPTS:
        difference = (logits(imported.network, tokenizer, prompt) - logits(reference, tokenizer, prompt)).abs().max()
        assert difference < TOLERANCE

    card = imported.card
    assert card.config["n_kv_head"] == 2 and card.config["rope_base"] == 50000.0 and card.config["mlp"] == "swiglu"
    assert card.config["tie_embeddings"] is False and card.context_length == 64
    assert card.license == "apache-2.0"
    assert card.chat.template == CHAT_TEMPLATE
    assert (card.chat.bos_token, card.chat.eos_token, card.chat.stop) == ("<|im_start|>", "<|im_end|>", ["<|im_end|>"])
    assert card.tokenizer.kind == "hf" and card.tokenizer.sha256 and card.tokenizer.vocab_size == VOCAB
    assert imported.tokenizer.encode(PROMPTS[0]) == tokenizer.encode(PROMPTS[0]).ids
    assert "gguf-llama" in card.tags and any(tag.startswith("gguf-") and tag != "gguf-llama" for tag in card.tags)
    assert "1 Q4_K" in card.imported.notes and "dequantised to float32" in card.imported.notes
    assert card.lineage.endswith(__import__("hashlib").sha256(path.read_bytes()).hexdigest())
    assert math.isfinite(card.metrics.paragraph_perplexity) and card.metrics.paragraph_perplexity > 1
    assert 0 < card.metrics.paragraph_bits_per_byte < 20


def test_same_variant_as_zoo_import_hf(zoo, tmp_path, tokenizer):
    """Tied embeddings (no output.weight in the file, as llama.cpp writes them) in F32:
    the card and the logits are those of `zoo import hf` of the same model."""
    model = tiny_model(tie_word_embeddings=True)
    path = tmp_path / "tied.gguf"
    write_gguf(path, model, [Q.F32], tokenizer)
    folder = tmp_path / "hf"
    model.save_pretrained(folder)
    tokenizer.save(str(folder / "tokenizer.json"))
    assert zoo("import", "hf", str(folder), "--name", "via-hf").code == 0
    assert zoo("import", "gguf", str(path), "--name", "via-gguf").code == 0
    via_hf, via_gguf = load("via-hf"), load("via-gguf")
    assert via_gguf.card.config == via_hf.card.config
    for prompt in PROMPTS:
        assert (
            logits(via_gguf.network, tokenizer, prompt) - logits(via_hf.network, tokenizer, prompt)
        ).abs().max() < 1e-5

    again = zoo("import", "gguf", str(path), "--name", "via-gguf")
    assert again.code == 1 and "via-gguf" in again.err and len(again.err.strip().splitlines()) == 1


def test_qwen2_keeps_its_rows_and_biases(zoo, tmp_path, tokenizer):
    """qwen2 files are not permuted and carry query/key/value biases. Dequantised,
    so the layout alone is compared: the packed kernel rounds activations
    (tests/test_quantized.py bounds that)."""
    model = tiny_model("Qwen2Config", tie_word_embeddings=False)
    path = tmp_path / "qwen.gguf"
    held = write_gguf(path, model, [Q.Q8_0, Q.F16], tokenizer, name="Tiny Qwen")
    assert zoo("import", "gguf", str(path), "--license", "mit", "--dequantize").code == 0
    imported = load("tiny-qwen")
    assert imported.card.license == "mit"  # --license over the file's general.license
    assert imported.card.config["attention_bias"] == "qkv"
    reference = dequantised_model(model, held)
    assert (
        logits(imported.network, tokenizer, PROMPTS[0]) - logits(reference, tokenizer, PROMPTS[0])
    ).abs().max() < TOLERANCE


# --- hostile files --------------------------------------------------------------


def _string(text: str | bytes, length: int | None = None) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw) if length is None else length) + raw


def _header(version=3, tensors=0, metadata=None, metadata_count=None, tensor_infos=b"", tensor_count=None):
    """A GGUF file's bytes: ``metadata`` (key -> bytes of type and value), tensor infos, 64 data bytes."""
    entries = metadata if metadata is not None else {"general.architecture": struct.pack("<I", 8) + _string("llama")}
    body = b"".join(_string(key) + value for key, value in entries.items())
    count = len(entries) if metadata_count is None else metadata_count
    head = b"GGUF" + struct.pack("<IQQ", version, tensors if tensor_count is None else tensor_count, count)
    data = head + body + tensor_infos
    return data + bytes(-len(data) % 32) + bytes(64)


def _tensor(name="token_embd.weight", dims=(32, 2), kind=0, offset=0) -> bytes:
    return _string(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, kind, offset)


HOSTILE_HEADERS = {
    "not-gguf": (b"PK\x03\x04" + bytes(100), "magic bytes 'GGUF'"),
    "version-1": (_header(version=1), "version 1"),
    "huge-tensor-count": (_header(tensor_count=2**40), "1,099,511,627,776 tensors"),
    "huge-metadata-count": (_header(metadata_count=2**62), "metadata entries claimed"),
    "metadata-past-the-end": (b"GGUF" + struct.pack("<IQQ", 3, 0, 5), "the file ends at 24"),
    "string-2-to-the-60": (
        _header(metadata={"general.name": struct.pack("<I", 8) + _string(b"x", 2**60)}),
        "claims 1,152,921,504,606,846,976 bytes",
    ),
    "key-2-to-the-60": (b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, 2**60) + bytes(64), "metadata key 0 claims"),
    "array-2-to-the-60": (
        _header(metadata={"tokenizer.ggml.scores": struct.pack("<IIQ", 9, 6, 2**60)}),
        "claims 1,152,921,504,606,846,976 items",
    ),
    "strings-past-the-end": (
        _header(metadata={"tokenizer.ggml.tokens": struct.pack("<IIQ", 9, 8, 2**20)}),
        "the file has room for fewer",
    ),
    "array-of-arrays": (_header(metadata={"x": struct.pack("<IIQ", 9, 9, 1)}), "arrays of arrays"),
    "unknown-value-type": (_header(metadata={"x": struct.pack("<I", 77)}), "value type 77"),
    "offset-past-the-end": (_header(tensors=1, tensor_infos=_tensor(offset=2**40)), "lies at data offset"),
    "dims-past-the-limit": (_header(tensors=1, tensor_infos=_tensor(dims=(2**32, 2**32))), "the parameter limit"),
    "five-dims": (_header(tensors=1, tensor_infos=_tensor(dims=(1, 1, 1, 1, 1))), "5 dimensions"),
    "unknown-quant-type": (_header(tensors=1, tensor_infos=_tensor(kind=99)), "type 99, which ggml does not define"),
    "unread-quant-type": (_header(tensors=1, tensor_infos=_tensor(kind=int(Q.Q8_1), dims=(32, 1))), "is Q8_1"),
    "ragged-blocks": (_header(tensors=1, tensor_infos=_tensor(kind=int(Q.Q4_0), dims=(33, 1))), "32-value blocks"),
    "name-twice": (_header(tensors=2, tensor_infos=_tensor(dims=(4,)) + _tensor(dims=(4,), offset=32)), "twice"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_HEADERS))
def test_a_hostile_header_is_one_line_before_anything_is_read(case, zoo, tmp_path, private_home):
    data, expected = HOSTILE_HEADERS[case]
    path = tmp_path / "hostile.gguf"
    path.write_bytes(data)
    tracemalloc.start()
    try:
        result = zoo("import", "gguf", str(path), "--name", "hostile")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.code == 1
    assert result.err.startswith("zoo: ") and len(result.err.strip().splitlines()) == 1
    assert expected in result.err
    assert peak < 4 * 1024 * 1024  # the header walk read a few numbers, whatever the file claimed
    assert not private_home.exists() or not any(private_home.rglob("*.safetensors"))


def _model_case(tmp_path, tokenizer, **write):
    path = tmp_path / "tiny.gguf"
    write_gguf(path, tiny_model(), [Q.F16], tokenizer, **write)
    return path


HOSTILE_MODELS = {
    "missing-tensor": (dict(skip=("blk.1.ffn_up.weight",)), "no tensor 'blk.1.ffn_up.weight'"),
    "no-name": (dict(name=None), "--name NAME"),
    "value-width": (
        dict(metadata={"llama.attention.value_length": (32, gguf.GGUFValueType.UINT32)}),
        "keys and values of different widths",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_MODELS))
def test_a_file_that_does_not_describe_a_model_is_one_line(case, zoo, tmp_path, tokenizer, private_home):
    write, expected = HOSTILE_MODELS[case]
    path = _model_case(tmp_path, tokenizer, **write)
    result = zoo("import", "gguf", str(path))
    assert result.code == 1
    assert result.err.startswith("zoo: ") and len(result.err.strip().splitlines()) == 1
    assert expected in result.err
    assert not private_home.exists() or not any(private_home.rglob("*.safetensors"))


def test_wrong_architecture_and_wrong_shapes(zoo, tmp_path, tokenizer, private_home):
    """A bloom file, and a llama file whose metadata's head counts do not fit its tensors."""
    model = tiny_model()
    bloom = tmp_path / "bloom.gguf"
    writer = gguf.GGUFWriter(str(bloom), "bloom")
    writer.add_name("bloom")
    writer.add_tensor("token_embd.weight", np.zeros((4, 32), np.float32))
    writer.write_header_to_file(), writer.write_kv_data_to_file(), writer.write_tensors_to_file(), writer.close()
    result = zoo("import", "gguf", str(bloom))
    assert result.code == 1 and "architecture 'bloom'" in result.err and "llama, qwen2" in result.err

    model.config.num_key_value_heads = 1  # the file then says one key/value head; its tensors hold two
    wrong = tmp_path / "wrong.gguf"
    write_gguf(wrong, model, [Q.F32], tokenizer)
    result = zoo("import", "gguf", str(wrong))
    assert result.code == 1 and len(result.err.strip().splitlines()) == 1
    assert "attn_k.weight" in result.err and "1 heads of 64 need 64" in result.err

    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(wrong.read_bytes()[:-1000])
    result = zoo("import", "gguf", str(truncated))
    assert result.code == 1 and "the file has" in result.err
    assert not private_home.exists() or not any(private_home.rglob("*.safetensors"))


def test_the_package_dequantises_what_the_importer_reads():
    """The types the importer claims are those the package dequantises, and no more."""
    from zoo_core.interop.gguf_files import READ_TYPES

    assert READ_TYPES == set(EVERY_TYPE + IQ_TYPES)
    for kind in EVERY_TYPE + IQ_TYPES:
        block, size = gguf.GGML_QUANT_SIZES[kind]
        assert gguf.quants.dequantize(np.zeros((1, size), np.uint8), kind).shape == (1, block)


def test_the_import_shows_its_progress_stage_by_stage(tmp_path, tokenizer, private_home):
    """Half a minute for a 135M model: on a terminal a bar counts the tensors read (kept
    packed or dequantised), then the network built, the paragraph measured and the checkpoint written."""
    import io

    from zoo_core.interop.gguf_import import import_gguf
    from zoo_core.training.progress import WorkProgress

    path = tmp_path / "tiny.gguf"
    write_gguf(path, tiny_model(), [Q.F32], tokenizer)
    screen = io.StringIO()
    card, _ = import_gguf(path, "shown", progress=WorkProgress("import shown", stream=screen, interactive=True))
    drawn = screen.getvalue()
    assert card.name == "shown"
    assert "import shown: reading tensors" in drawn
    assert "import shown: checking, measuring, writing" in drawn
