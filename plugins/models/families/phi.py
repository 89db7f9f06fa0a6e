"""Phi (microsoft/phi-1, phi-1_5, phi-2): LayerNorm with biases, one norm feeding the
attention and a plain feed-forward side by side (residual "parallel-shared-norm"),
biases in every linear layer including the vocabulary head, and RoPE on part of
each head in transformers' rotate_half order.

llama.cpp's ``phi2`` rotates NeoX-style and names the same tensors; its
attention is read split (``attn_q``, ``attn_k``, ``attn_v``) or fused
(``attn_qkv``). transformers' GGUF loader does not read it: the export is checked
by reading it back in the zoo (and, in the tests, in llama.cpp).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from zoo_core.errors import ZooError

from .checked import CheckedFamily, gguf_keys, refusing, rope_from_metadata, rotary_refusal
from .layout import hf_activation, plain_hf_names, zoo_activation
from .rope import rope_parameters, rope_settings
from .tensors import HFTensor

_LAYER = "model.layers.{i}"
TENSORS = (
    HFTensor("model.embed_tokens", ("TOKEN_EMBD",)),
    HFTensor(f"{_LAYER}.input_layernorm", ("ATTN_NORM",)),
    HFTensor(f"{_LAYER}.self_attn.q_proj", ("ATTN_Q",)),
    HFTensor(f"{_LAYER}.self_attn.k_proj", ("ATTN_K",)),
    HFTensor(f"{_LAYER}.self_attn.v_proj", ("ATTN_V",)),
    HFTensor(f"{_LAYER}.self_attn.dense", ("ATTN_OUT",)),
    HFTensor(f"{_LAYER}.self_attn.q_layernorm", ("ATTN_Q_NORM",)),  # qk_layernorm: one LayerNorm all heads share
    HFTensor(f"{_LAYER}.self_attn.k_layernorm", ("ATTN_K_NORM",)),
    HFTensor(f"{_LAYER}.mlp.fc1", ("FFN_UP",)),
    HFTensor(f"{_LAYER}.mlp.fc2", ("FFN_DOWN",)),
    HFTensor("model.final_layernorm", ("OUTPUT_NORM",)),
    HFTensor("lm_head", ("OUTPUT",)),
)


def settings(hf) -> dict[str, Any]:
    """The card's config of transformers' PhiConfig."""
    mlp = zoo_activation(hf.hidden_act, gated=False)
    if mlp is None:
        raise ZooError(f"hidden_act '{hf.hidden_act}' has no zoo counterpart ({', '.join(plain_hf_names())} map)")
    rope = rope_settings(hf.rope_parameters)
    reason = rotary_refusal(hf.hidden_size // hf.num_attention_heads, rope.get("rotary_fraction", 1.0))
    if reason:
        raise ZooError(reason)
    return {
        "d_model": hf.hidden_size,
        "n_layer": hf.num_hidden_layers,
        "n_head": hf.num_attention_heads,
        "n_kv_head": hf.num_key_value_heads or hf.num_attention_heads,
        "d_ff": hf.intermediate_size,
        "dropout": 0.0,
        "positions": "rope",
        "norm": "layernorm",
        "norm_eps": float(hf.layer_norm_eps),
        "mlp": mlp,
        "residual": "parallel-shared-norm",
        "layer_bias": True,
        "attention_bias": "all",
        "bias": True,
        "tie_embeddings": bool(hf.tie_word_embeddings),
        **rope,
        **({"qk_norm": "layernorm"} if hf.qk_layernorm else {}),
    }


def fields(config: dict[str, Any]) -> dict[str, Any]:
    """PhiConfig's fields of a card's config (its defaults filled in)."""
    return {
        "hidden_size": config["d_model"],
        "num_hidden_layers": config["n_layer"],
        "num_attention_heads": config["n_head"],
        "num_key_value_heads": config["n_kv_head"],
        "intermediate_size": config["d_ff"],
        "layer_norm_eps": config["norm_eps"],
        "hidden_act": hf_activation(config["mlp"]),
        "tie_word_embeddings": config["tie_embeddings"],
        "rope_parameters": {"partial_rotary_factor": 1.0, **rope_parameters(config)},
        "qk_layernorm": config.get("qk_norm") == "layernorm",
    }


GGUF_KEYS = gguf_keys(
    ("hidden_size", "LLM.EMBEDDING_LENGTH"),
    ("num_hidden_layers", "LLM.BLOCK_COUNT"),
    ("num_attention_heads", "Attention.HEAD_COUNT"),
    ("num_key_value_heads", "Attention.HEAD_COUNT_KV", "whole", lambda read: read["num_attention_heads"]),
    ("intermediate_size", "LLM.FEED_FORWARD_LENGTH"),
    ("max_position_embeddings", "LLM.CONTEXT_LENGTH"),
    ("layer_norm_eps", "Attention.LAYERNORM_EPS", "positive"),
    ("rope_theta", "Rope.FREQ_BASE", "positive", 10000.0),
)


def gguf_checks(hf, metadata, path, key) -> None:
    """The fields llama.cpp's phi2 keys do not hold as transformers' fields."""
    rope_from_metadata(hf, metadata, path, key, hf.hidden_size // hf.num_attention_heads)
    hf.hidden_act, hf.qk_layernorm, hf.tie_word_embeddings = "gelu_new", False, False


@dataclass(frozen=True)
class PhiFamily(CheckedFamily):
    """llama.cpp's phi2 files hold the attention split (attn_q, attn_k, attn_v) or fused
    (attn_qkv, [queries; keys; values]: what its converter wrote of phi-2's first checkpoints)."""

    def tensors_from_gguf(self, config, tensors, dequantize, path):
        if any(".attn_qkv." in name for name in tensors):
            fused = dataclasses.replace(self, gguf_joined=(("ATTN_QKV", ("ATTN_Q", "ATTN_K", "ATTN_V")),))
            return CheckedFamily.tensors_from_gguf(fused, config, tensors, dequantize, path)
        return super().tensors_from_gguf(config, tensors, dequantize, path)


PHI = PhiFamily(
    name="phi",
    title="Phi",
    hf_model_types=("phi",),
    hf_class="PhiForCausalLM",
    tensors=TENSORS,
    settings=settings,
    fields=fields,
    gguf_architecture="phi2",
    gguf_keys=GGUF_KEYS,
    gguf_checks=gguf_checks,
    # transformers' GGUF loader reads no phi2 file: the export is checked by reading it back in
    # the zoo, and the tests run it in llama.cpp itself, whose phi2 graph fixes what follows.
    refuses_gguf=refusing(
        (lambda c: c.get("qk_norm") is not None, "has qk_layernorm; llama.cpp's phi2 graph has no query/key norm"),
        (lambda c: c["tie_embeddings"], "ties its head; llama.cpp's phi2 reads output.weight and its bias apart"),
        (lambda c: c["mlp"] != "gelu-tanh", "has another feed-forward than gelu-tanh, llama.cpp's phi2's only one"),
    ),
)
