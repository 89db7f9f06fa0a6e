"""Persimmon (adept/persimmon-8b-base) as a zoo family record.

Persimmon's block is arithmetic the zoo's transformer already has: LayerNorm
with biases before each sublayer, a plain squared-ReLU feed-forward (`mlp =
"relu2"`), biases in every linear layer but the vocabulary head, and RoPE on
part of each head in transformers' rotate_half order. Its attention is one
``query_key_value`` tensor holding each head's query, key and value rows side
by side, as GPT-NeoX's does. So the family is data: its config fields both ways
and which of its tensors holds which of llama.cpp's canonical ones.
"""

from __future__ import annotations

from typing import Any

from zoo_core.errors import ZooError
from zoo_plugins.models.families.base import Family
from zoo_plugins.models.families.rope import rope_parameters, rope_settings
from zoo_plugins.models.families.tensors import HFTensor

_LAYER = "model.layers.{i}"

# What the zoo's config must hold for a variant without a recorded family to be written as Persimmon.
LAYOUT = {
    "block": "pre-norm",
    "norm": "layernorm",
    "residual": "sequential",
    "mlp": "relu2",
    "layer_bias": True,
    "attention_bias": "all",
    "bias": False,
}


def settings(hf) -> dict[str, Any]:
    """The card's config of transformers' PersimmonConfig."""
    if hf.qk_layernorm:
        raise ZooError("qk_layernorm: Persimmon's LayerNorm on queries and keys has no zoo counterpart")
    if hf.hidden_act != "relu2":
        raise ZooError(f"hidden_act '{hf.hidden_act}': Persimmon's feed-forward is relu2")
    head_size = hf.hidden_size // hf.num_attention_heads
    rope = rope_settings(hf.rope_parameters)
    fraction = rope.get("rotary_fraction", 1.0)
    if int(fraction * head_size) != round(fraction * head_size) or int(fraction * head_size) % 2:
        raise ZooError(
            f"partial_rotary_factor {fraction} of a {head_size}-channel head: the zoo rotates other channels"
        )
    return {
        **{key: value for key, value in LAYOUT.items() if key != "block"},
        "d_model": hf.hidden_size,
        "n_layer": hf.num_hidden_layers,
        "n_head": hf.num_attention_heads,
        "d_ff": hf.intermediate_size,
        "dropout": 0.0,
        "positions": "rope",
        "norm_eps": float(hf.layer_norm_eps),
        "tie_embeddings": bool(hf.tie_word_embeddings),
        **rope,
    }


def fields(config: dict[str, Any]) -> dict[str, Any]:
    """PersimmonConfig's fields of a card's config (its defaults filled in)."""
    return {
        "hidden_size": config["d_model"],
        "num_hidden_layers": config["n_layer"],
        "num_attention_heads": config["n_head"],
        "intermediate_size": config["d_ff"],
        "layer_norm_eps": config["norm_eps"],
        "hidden_act": "relu2",
        "qk_layernorm": False,
        "tie_word_embeddings": config["tie_embeddings"],
        "rope_parameters": {"partial_rotary_factor": 1.0, **rope_parameters(config)},
    }


def choose(config: dict[str, Any]) -> tuple[str | None, str]:
    """Whether a variant that records no family is laid out as Persimmon, and if not, why."""
    for key, value in LAYOUT.items():
        if config.get(key) != value:
            return None, f"{key} {config.get(key)!r}, where Persimmon's layout has {value!r}"
    if config["n_kv_head"] != config["n_head"] or config["head_size"] * config["n_head"] != config["d_model"]:
        return None, "grouped key/value heads or a head size of its own; Persimmon's heads are slices of the width"
    if config.get("qk_norm") or config.get("sliding_window") or config.get("rope_scaling"):
        return None, "QK-norm, a sliding window or RoPE scaling, which Persimmon has not"
    if config.get("embedding_scale") not in (None, 1, 1.0) or config.get("logit_softcap") is not None:
        return None, "an embedding scale or logit soft-cap, which Persimmon has not"
    if config.get("logit_scale") not in (None, 1, 1.0) or config.get("layernorm_bias") is False:
        return None, "a logit scale or LayerNorms without biases, which Persimmon has not"
    return "persimmon", ""


PERSIMMON = Family(
    name="persimmon",
    title="Persimmon",
    hf_model_types=("persimmon",),
    hf_class="PersimmonForCausalLM",
    tensors=(
        HFTensor("model.embed_tokens", ("TOKEN_EMBD",)),
        HFTensor(f"{_LAYER}.input_layernorm", ("ATTN_NORM",)),
        HFTensor(f"{_LAYER}.self_attn.query_key_value", ("ATTN_Q", "ATTN_K", "ATTN_V"), join="heads"),
        HFTensor(f"{_LAYER}.self_attn.dense", ("ATTN_OUT",)),
        HFTensor(f"{_LAYER}.post_attention_layernorm", ("FFN_NORM",)),
        HFTensor(f"{_LAYER}.mlp.dense_h_to_4h", ("FFN_UP",)),
        HFTensor(f"{_LAYER}.mlp.dense_4h_to_h", ("FFN_DOWN",)),
        HFTensor("model.final_layernorm", ("OUTPUT_NORM",)),
        HFTensor("lm_head", ("OUTPUT",)),
    ),
    settings=settings,
    fields=fields,
    chooses=choose,
)
