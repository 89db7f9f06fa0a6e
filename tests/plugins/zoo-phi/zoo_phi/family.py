"""Phi (microsoft/phi-1, phi-1.5, phi-2) as a zoo family record.

Phi's block is arithmetic the zoo's transformer already has: LayerNorm with
biases, one norm feeding attention and a plain GELU feed-forward side by side
(residual "parallel-shared-norm"), biases in every linear layer including the
vocabulary head, and RoPE on part of each head in transformers' rotate_half
order. So the family is data: its config fields both ways and which of its
tensors holds which of llama.cpp's canonical ones.
"""

from __future__ import annotations

from typing import Any

from zoo_core.errors import ZooError
from zoo_plugins.models.families.base import Family
from zoo_plugins.models.families.layout import hf_activation, plain_hf_names, zoo_activation
from zoo_plugins.models.families.rope import rope_parameters, rope_settings
from zoo_plugins.models.families.tensors import HFTensor

_LAYER = "model.layers.{i}"

# What the zoo's config must hold for a variant without a recorded family to be written as Phi.
LAYOUT = {
    "block": "pre-norm",
    "norm": "layernorm",
    "residual": "parallel-shared-norm",
    "layer_bias": True,
    "attention_bias": "all",
    "bias": True,
}


def settings(hf) -> dict[str, Any]:
    """The card's config of transformers' PhiConfig."""
    if hf.qk_layernorm:
        raise ZooError("qk_layernorm: Phi's LayerNorm on queries and keys has no zoo counterpart (QK-norm is RMSNorm)")
    mlp = zoo_activation(hf.hidden_act, gated=False)
    if mlp is None:
        raise ZooError(f"hidden_act '{hf.hidden_act}' has no zoo counterpart ({', '.join(plain_hf_names())} map)")
    return {
        **{key: value for key, value in LAYOUT.items() if key != "block"},
        "d_model": hf.hidden_size,
        "n_layer": hf.num_hidden_layers,
        "n_head": hf.num_attention_heads,
        "n_kv_head": hf.num_key_value_heads,
        "d_ff": hf.intermediate_size,
        "dropout": 0.0,
        "positions": "rope",
        "norm_eps": float(hf.layer_norm_eps),
        "mlp": mlp,
        "tie_embeddings": bool(hf.tie_word_embeddings),
        **rope_settings(hf.rope_parameters),
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
        "rope_parameters": rope_parameters(config),
    }


def choose(config: dict[str, Any]) -> tuple[str | None, str]:
    """Whether a variant that records no family is laid out as Phi, and if not, why."""
    for key, value in LAYOUT.items():
        if config.get(key) != value:
            return None, f"{key} {config.get(key)!r}, where Phi's layout has {value!r}"
    if config["mlp"] not in ("relu", "gelu", "gelu-tanh"):
        return None, f"a {config['mlp']} feed-forward; Phi's is plain"
    if config["head_size"] * config["n_head"] != config["d_model"]:
        return None, "a head size of its own; Phi's heads are slices of the width"
    if config.get("qk_norm") or config.get("sliding_window") or config.get("rope_scaling"):
        return None, "QK-norm, a sliding window or RoPE scaling, which Phi has not"
    if config.get("embedding_scale") not in (None, 1, 1.0) or config.get("logit_softcap") is not None:
        return None, "an embedding scale or logit soft-cap, which Phi has not"
    return "phi", ""


PHI = Family(
    name="phi",
    title="Phi",
    hf_model_types=("phi",),
    hf_class="PhiForCausalLM",
    tensors=(
        HFTensor("model.embed_tokens", ("TOKEN_EMBD",)),
        HFTensor(f"{_LAYER}.input_layernorm", ("ATTN_NORM",)),
        HFTensor(f"{_LAYER}.self_attn.q_proj", ("ATTN_Q",)),
        HFTensor(f"{_LAYER}.self_attn.k_proj", ("ATTN_K",)),
        HFTensor(f"{_LAYER}.self_attn.v_proj", ("ATTN_V",)),
        HFTensor(f"{_LAYER}.self_attn.dense", ("ATTN_OUT",)),
        HFTensor(f"{_LAYER}.mlp.fc1", ("FFN_UP",)),
        HFTensor(f"{_LAYER}.mlp.fc2", ("FFN_DOWN",)),
        HFTensor("model.final_layernorm", ("OUTPUT_NORM",)),
        HFTensor("lm_head", ("OUTPUT",)),
    ),
    settings=settings,
    fields=fields,
    chooses=choose,
)
