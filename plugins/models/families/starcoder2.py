"""StarCoder2 (bigcode/starcoder2-3b): LayerNorm with biases, a plain tanh-GELU
feed-forward (``c_fc``, ``c_proj``), biases in every linear layer but the
vocabulary head (``use_bias``), grouped key/value heads and a sliding window.

llama.cpp's ``starcoder2`` rotates NeoX-style, so rows stay in transformers'
order; it has no key for a window, so a windowed variant is not written as GGUF.
"""

from __future__ import annotations

from typing import Any

from zoo_core.errors import ZooError

from .checked import CHECKED_BY_TRANSFORMERS, CheckedFamily, gguf_keys, refusing
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
    HFTensor(f"{_LAYER}.self_attn.o_proj", ("ATTN_OUT",)),
    HFTensor(f"{_LAYER}.post_attention_layernorm", ("FFN_NORM",)),
    HFTensor(f"{_LAYER}.mlp.c_fc", ("FFN_UP",)),
    HFTensor(f"{_LAYER}.mlp.c_proj", ("FFN_DOWN",)),
    HFTensor("model.norm", ("OUTPUT_NORM",)),
    HFTensor("lm_head", ("OUTPUT",)),
)


def settings(hf) -> dict[str, Any]:
    """The card's config of transformers' Starcoder2Config."""
    mlp = zoo_activation(hf.hidden_act, gated=False)
    if mlp is None:
        raise ZooError(f"hidden_act '{hf.hidden_act}' has no zoo counterpart ({', '.join(plain_hf_names())} map)")
    config = {
        "d_model": hf.hidden_size,
        "n_layer": hf.num_hidden_layers,
        "n_head": hf.num_attention_heads,
        "n_kv_head": hf.num_key_value_heads or hf.num_attention_heads,
        "d_ff": hf.intermediate_size,
        "dropout": 0.0,
        "positions": "rope",
        "norm": "layernorm",
        "norm_eps": float(hf.norm_epsilon),
        "mlp": mlp,
        "layer_bias": bool(hf.use_bias),
        "layernorm_bias": True,
        "attention_bias": "all" if hf.use_bias else "none",
        "bias": False,
        "tie_embeddings": bool(hf.tie_word_embeddings),
        **rope_settings(hf.rope_parameters),
    }
    if "rotary_fraction" in config:
        raise ZooError("partial_rotary_factor: StarCoder2's attention rotates every channel")
    if hf.sliding_window:
        config["sliding_window"] = int(hf.sliding_window)
    return config


def fields(config: dict[str, Any]) -> dict[str, Any]:
    """Starcoder2Config's fields of a card's config (its defaults filled in)."""
    return {
        "hidden_size": config["d_model"],
        "num_hidden_layers": config["n_layer"],
        "num_attention_heads": config["n_head"],
        "num_key_value_heads": config["n_kv_head"],
        "intermediate_size": config["d_ff"],
        "norm_epsilon": config["norm_eps"],
        "hidden_act": hf_activation(config["mlp"]),
        "use_bias": config["layer_bias"],
        "sliding_window": config.get("sliding_window") or None,
        "tie_word_embeddings": config["tie_embeddings"],
        "rope_parameters": rope_parameters(config),
    }


GGUF_KEYS = gguf_keys(
    ("hidden_size", "LLM.EMBEDDING_LENGTH"),
    ("num_hidden_layers", "LLM.BLOCK_COUNT"),
    ("num_attention_heads", "Attention.HEAD_COUNT"),
    ("num_key_value_heads", "Attention.HEAD_COUNT_KV", "whole", lambda read: read["num_attention_heads"]),
    ("intermediate_size", "LLM.FEED_FORWARD_LENGTH"),
    ("max_position_embeddings", "LLM.CONTEXT_LENGTH"),
    ("norm_epsilon", "Attention.LAYERNORM_EPS", "positive"),
    ("rope_theta", "Rope.FREQ_BASE", "positive", 10000.0),
)


def gguf_checks(hf, metadata, path, key) -> None:
    """The fields llama.cpp's starcoder2 keys do not hold (its biases: `gguf_settings`)."""
    hf.rope_parameters = {"rope_type": "default", "rope_theta": hf.rope_theta}
    hf.hidden_act, hf.tie_word_embeddings, hf.use_bias, hf.sliding_window = "gelu_pytorch_tanh", False, False, None


def gguf_settings(config: dict[str, Any], present: set[str]) -> dict[str, Any]:
    biased = "ATTN_Q.bias" in present
    return {**config, "layer_bias": biased, "attention_bias": "all" if biased else "none"}


STARCODER2 = CheckedFamily(
    name="starcoder2",
    title="StarCoder2",
    hf_model_types=("starcoder2",),
    hf_class="Starcoder2ForCausalLM",
    tensors=TENSORS,
    settings=settings,
    fields=fields,
    gguf_architecture="starcoder2",
    gguf_keys=GGUF_KEYS,
    gguf_checks=gguf_checks,
    gguf_settings=gguf_settings,
    refuses_gguf=refusing(
        (lambda c: bool(c.get("sliding_window")), "has a sliding window; llama.cpp's starcoder2 has no key for one"),
        (
            lambda c: c.get("rope_base", 10000.0) != 10000.0,
            f"sets rope_base, which {CHECKED_BY_TRANSFORMERS} does not read in a starcoder2 file",
        ),
    ),
)
