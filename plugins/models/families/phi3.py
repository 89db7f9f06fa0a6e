"""Phi-3 (microsoft/Phi-3-mini-4k-instruct): Llama's arithmetic with its attention's
query, key and value rows in one ``qkv_proj`` and its gate and up rows in one
``gate_up_proj``, a sliding window, and optionally partial rotary.

llama.cpp's ``phi3`` keeps both fused (``attn_qkv``, and ``ffn_up`` holding the
gate's rows before the up projection's) and rotates NeoX-style, so its rows
stay in transformers' order.
"""

from __future__ import annotations

from typing import Any

from zoo_core.errors import ZooError

from . import llama
from .checked import (
    CHECKED_BY_TRANSFORMERS,
    CheckedFamily,
    gguf_keys,
    metadata_whole,
    refusing,
    rope_from_metadata,
    rotary_refusal,
)
from .tensors import HFTensor

_LAYER = "model.layers.{i}"
TENSORS = (
    HFTensor("model.embed_tokens", ("TOKEN_EMBD",)),
    HFTensor(f"{_LAYER}.input_layernorm", ("ATTN_NORM",)),
    HFTensor(f"{_LAYER}.self_attn.qkv_proj", ("ATTN_Q", "ATTN_K", "ATTN_V")),
    HFTensor(f"{_LAYER}.self_attn.o_proj", ("ATTN_OUT",)),
    HFTensor(f"{_LAYER}.post_attention_layernorm", ("FFN_NORM",)),
    HFTensor(f"{_LAYER}.mlp.gate_up_proj", ("FFN_GATE", "FFN_UP")),
    HFTensor(f"{_LAYER}.mlp.down_proj", ("FFN_DOWN",)),
    HFTensor("model.norm", ("OUTPUT_NORM",)),
    HFTensor("lm_head", ("OUTPUT",)),
)


def settings(hf) -> dict[str, Any]:
    """The card's config of transformers' Phi3Config (no biases; its head is a slice of the width)."""
    hf.head_dim = hf.hidden_size // hf.num_attention_heads  # Phi3Attention's own, whatever the config says
    config = llama.settings(hf)
    reason = rotary_refusal(hf.head_dim, config.get("rotary_fraction", 1.0))
    if reason:
        raise ZooError(reason)
    return config


def fields(config: dict[str, Any]) -> dict[str, Any]:
    written = llama.fields(config)
    del written["head_dim"]
    return {**written, "sliding_window": config.get("sliding_window") or None}


GGUF_KEYS = gguf_keys(
    ("hidden_size", "LLM.EMBEDDING_LENGTH"),
    ("num_hidden_layers", "LLM.BLOCK_COUNT"),
    ("num_attention_heads", "Attention.HEAD_COUNT"),
    ("num_key_value_heads", "Attention.HEAD_COUNT_KV", "whole", lambda read: read["num_attention_heads"]),
    ("intermediate_size", "LLM.FEED_FORWARD_LENGTH"),
    ("max_position_embeddings", "LLM.CONTEXT_LENGTH"),
    ("rms_norm_eps", "Attention.LAYERNORM_RMS_EPS", "positive"),
    ("rope_theta", "Rope.FREQ_BASE", "positive", 10000.0),
)


def gguf_checks(hf, metadata, path, key) -> None:
    """The fields llama.cpp's phi3 keys do not hold as transformers' fields."""
    rope_from_metadata(hf, metadata, path, key, hf.hidden_size // hf.num_attention_heads)
    hf.sliding_window = metadata_whole(path, metadata, key("Attention.SLIDING_WINDOW"), None)
    hf.hidden_act, hf.tie_word_embeddings = "silu", False


PHI3 = CheckedFamily(
    name="phi3",
    title="Phi-3",
    hf_model_types=("phi3",),
    hf_class="Phi3ForCausalLM",
    tensors=TENSORS,
    settings=settings,
    fields=fields,
    gguf_architecture="phi3",
    gguf_keys=GGUF_KEYS,
    gguf_checks=gguf_checks,
    # llama.cpp's phi3 keeps the fused rows: [queries; keys; values], and [gate; up] in ffn_up.
    gguf_joined=(("ATTN_QKV", ("ATTN_Q", "ATTN_K", "ATTN_V")), ("FFN_UP", ("FFN_GATE", "FFN_UP"))),
    gguf_metadata=lambda config: (
        [("phi3.attention.sliding_window", config["sliding_window"], "UINT32")] if config.get("sliding_window") else []
    ),
    refuses_gguf=refusing(
        (
            lambda c: c.get("rotary_fraction", 1.0) != 1.0,
            f"has partial rotary, which {CHECKED_BY_TRANSFORMERS} does not read in a phi3 file",
        ),
        (
            lambda c: bool(c.get("sliding_window")),
            f"has a sliding window, which {CHECKED_BY_TRANSFORMERS} does not read in a phi3 file",
        ),
    ),
)
