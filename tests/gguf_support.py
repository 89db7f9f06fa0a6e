"""Tiny GGUF files for the tests, written by llama.cpp's own `gguf.GGUFWriter`.

`write_llama_gguf` lays out a transformers `LlamaForCausalLM` as llama.cpp's
converter does (its tensor names from the package's name map; each head's
query and key rows permuted, row 2i from transformers' row i, 2i + 1 from row
i + D/2; see zoo_core/interop/gguf_import.py) and stores every matrix in the
type asked, quantised by `gguf.quants.quantize`. The package has no K-quant
quantiser, so K-quant matrices are random blocks with finite scales: what
matters is that the importer reads them as the package's dequantisation does.
`dequantised_model` gives back the transformers model holding exactly the
values the file stores: the reference the import is checked against.
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import torch

Q = gguf.GGMLQuantizationType
QUANTISED = [Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1]
K_QUANTS = [Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K]
EVERY_TYPE = [Q.F32, Q.F16, Q.BF16, *QUANTISED, *K_QUANTS]
# The importance-matrix, ternary and microscaling types: no quantiser in the package either.
IQ_TYPES = [Q.IQ1_S, Q.IQ1_M, Q.IQ2_XXS, Q.IQ2_XS, Q.IQ2_S, Q.IQ3_XXS, Q.IQ3_S, Q.IQ4_NL, Q.IQ4_XS]
IQ_TYPES += [Q.TQ1_0, Q.TQ2_0, Q.MXFP4]
# Byte offsets of each block's float16 scales (ggml's block_* structs in ggml-common.h).
_K_SCALES = {Q.Q2_K: (80, 82), Q.Q3_K: (108,), Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,)}
_K_SCALES.update({kind: (0,) for kind in IQ_TYPES[:1] + IQ_TYPES[2:9]})
_K_SCALES.update({Q.TQ1_0: (52,), Q.TQ2_0: (64,), Q.IQ1_M: (), Q.MXFP4: ()})
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def tiny_tokenizer(vocab_size: int):
    """A byte-level BPE of ``vocab_size`` tokens trained by `tokenizers` on a few lines."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    lines = ["the quick brown fox jumps over the lazy dog", "a library on the corner of two streets"] * 20
    tokenizer.train_from_iterator(lines, trainer)
    assert tokenizer.get_vocab_size() == vocab_size
    return tokenizer


def permuted(rows: torch.Tensor, n_head: int) -> torch.Tensor:
    """llama.cpp's order of one projection's rows: per head (2, D/2) stored as (D/2, 2)."""
    half = rows.shape[0] // n_head // 2
    return rows.reshape(n_head, 2, half, *rows.shape[1:]).transpose(1, 2).reshape(rows.shape)


def stored(values: np.ndarray, kind, seed: int) -> np.ndarray:
    """The bytes (or floats) a GGUF file holds for ``values`` in type ``kind``."""
    if kind in _K_SCALES:
        block, size = gguf.GGML_QUANT_SIZES[kind]
        rows = values.shape[0]
        blocks = np.random.default_rng(seed).integers(0, 256, (rows * values.shape[1] // block, size), dtype=np.uint8)
        for offset in _K_SCALES[kind]:
            blocks[:, offset : offset + 2] = np.frombuffer(np.float16(1e-4).tobytes(), np.uint8)
        if kind == Q.IQ1_M:  # its float16 scale is the top nibbles of its four 16-bit scales (0x068D: 1e-4)
            for byte, nibble in zip((49, 51, 53, 55), (0xD, 0x8, 0x6, 0x0)):
                blocks[:, byte] = (blocks[:, byte] & 0x0F) | (nibble << 4)
        if kind == Q.MXFP4:  # one shared power of two per block (E8M0): 2**-10
            blocks[:, 0] = 117
        return blocks.reshape(rows, -1)
    return gguf.quants.quantize(values.astype(np.float32), kind)


def write_gguf(
    path: Path, model, kinds, tokenizer, *, name="Tiny Llama 1.0", license="apache-2.0", metadata=None, skip=()
) -> dict[str, np.ndarray]:
    """``model`` (a LlamaForCausalLM or Qwen2ForCausalLM) as a GGUF file, its
    matrices in ``kinds`` taken in turn, its vectors in F32, leaving out the
    tensors named in ``skip``; extra ``metadata``: key -> (value, GGUFValueType).
    Returns each tensor's float32 values as the file stores them (GGUF names)."""
    config = model.config
    architecture = config.model_type
    vocab = [token for token, _ in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])]
    writer = gguf.GGUFWriter(str(path), architecture)
    if name:
        writer.add_name(name)
    if license:
        writer.add_license(license)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(vocab)
    writer.add_token_types([gguf.TokenType.CONTROL if t in SPECIALS else gguf.TokenType.NORMAL for t in vocab])
    merges = json.loads(tokenizer.to_str())["model"]["merges"]
    writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in merges])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_chat_template(CHAT_TEMPLATE)
    for key, value in (metadata or {}).items():
        writer.add_key_value(key, value[0], value[1])
    names = _names(config)
    held = {}
    matrices = 0
    for seed, (hf_name, tensor) in enumerate(model.state_dict().items()):
        if config.tie_word_embeddings and hf_name == "lm_head.weight":
            continue
        gguf_name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        values = tensor.detach().float()
        if architecture == "llama" and ".q_proj." in hf_name:
            values = permuted(values, config.num_attention_heads)
        elif architecture == "llama" and ".k_proj." in hf_name:
            values = permuted(values, config.num_key_value_heads)
        values = values.numpy()
        kind = Q.F32 if values.ndim == 1 else kinds[matrices % len(kinds)]
        matrices += values.ndim - 1
        if gguf_name in skip:
            continue
        data = values if kind == Q.F32 else stored(values, kind, seed)
        writer.add_tensor(gguf_name, data, raw_dtype=None if kind == Q.F32 else kind)
        held[gguf_name] = gguf.quants.dequantize(data, kind).reshape(values.shape)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return held


def dequantised_model(model, held: dict[str, np.ndarray]):
    """A copy of ``model`` holding the values the GGUF file stores (rows unpermuted)."""
    import copy

    config = model.config
    names = _names(config)
    reference = copy.deepcopy(model)
    state = reference.state_dict()
    for hf_name in state:
        gguf_name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if gguf_name not in held:
            continue
        values = torch.from_numpy(np.array(held[gguf_name], dtype=np.float32))
        for part, heads in (("q_proj", config.num_attention_heads), ("k_proj", config.num_key_value_heads)):
            if config.model_type == "llama" and f".{part}." in hf_name:  # undo permuted(): (D/2, 2) back to (2, D/2)
                half = values.shape[0] // heads // 2
                values = values.reshape(heads, half, 2, -1).transpose(1, 2).reshape(values.shape)
        state[hf_name] = values
    reference.load_state_dict(state)
    return reference


def _names(config):
    arch = next(a for a, text in gguf.MODEL_ARCH_NAMES.items() if text == config.model_type)
    return gguf.get_tensor_name_map(arch, config.num_hidden_layers)
