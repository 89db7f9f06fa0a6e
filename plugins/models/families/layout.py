"""A loaded variant's transformer settings with every default filled in, and the
names other libraries give the zoo's feed-forward kinds, written once."""

from __future__ import annotations

from typing import Any, Mapping

import torch

# The zoo's feed-forward kinds and transformers' names for the same function: the
# first is what an export writes, the rest read the same (gelu_pytorch_tanh is
# the tanh approximation too). A gated kind's name is its gate's activation.
HF_ACTIVATIONS = {
    "relu": ("relu",),
    "gelu": ("gelu",),
    "gelu-tanh": ("gelu_new", "gelu_pytorch_tanh"),
    "swiglu": ("silu",),
    "geglu": ("gelu",),
    "geglu-tanh": ("gelu_pytorch_tanh", "gelu_new"),
}
GATED_KINDS = ("swiglu", "geglu", "geglu-tanh")
# TransformerLens' act_fn for each kind (gated: its gate's).
LENS_ACTIVATIONS = {
    "relu": "relu",
    "relu2": "relu2",
    "gelu": "gelu",
    "gelu-tanh": "gelu_new",
    "swiglu": "silu",
    "geglu": "gelu",
    "geglu-tanh": "gelu_pytorch_tanh",
}


# Settings of the typed config no built-in family (nor TransformerLens) has a place for yet:
# Gemma-style sandwich norms, unit-offset RMSNorm, attention soft-capping, a query scale, layer groups.
# Granite's residual multiplier and SmolLM3's layers without RoPE: only their own families write them.
UNMAPPED_SETTINGS = ("layers", "norm_placement", "attention_softcap", "query_scale", "residual_scale", "rope")


def unmapped_setting(config: dict[str, Any]) -> str | None:
    """The first setting the card sets that no built-in family writes, or None."""
    if config.get("norm") not in (None, "layernorm", "rmsnorm"):
        return "norm"
    return next((key for key in UNMAPPED_SETTINGS if key in config), None)


def zoo_activation(hidden_act: str, gated: bool) -> str | None:
    """The zoo's kind for transformers' ``hidden_act`` (gated or plain), or None."""
    for kind, names in HF_ACTIVATIONS.items():
        if (kind in GATED_KINDS) == gated and hidden_act in names:
            return kind
    return None


def hf_activation(kind: str) -> str:
    return HF_ACTIVATIONS[kind][0]


def plain_hf_names() -> list[str]:
    return [name for kind, names in HF_ACTIVATIONS.items() if kind not in GATED_KINDS for name in names]


def gated(config: dict[str, Any]) -> bool:
    return config.get("mlp", "relu") in GATED_KINDS


def card_layout(card) -> dict[str, Any]:
    """The card's config with what a transformer card may leave unset filled in as
    the transformer builds it (pre-norm blocks, LayerNorm, learned positions)."""
    return {"block": "pre-norm", "norm": "layernorm", "positions": "learned", **card.config}


def resolved(model) -> dict[str, Any]:
    """`card_layout` with what the built network shows filled in: the head counts,
    widths and epsilon, and which linear layers carry biases."""
    network = model.network
    config = card_layout(model.card)
    attention = network.blocks[0].attention
    state = network.state_dict()
    head_size = attention.proj.weight.shape[1] // config["n_head"]
    has_bias = {name for name in state if name.startswith("blocks.0.") and name.endswith(".bias")}
    qkv_bias = "blocks.0.attention.qkv.bias" in has_bias
    eps = network.final_norm.eps
    return {
        "residual": "sequential",
        **config,
        "d_model": network.token_embedding.weight.shape[1],
        "n_layer": len(network.blocks),
        "head_size": head_size,
        "n_kv_head": (attention.qkv.weight.shape[0] // head_size - config["n_head"]) // 2,
        "d_ff": _dense_width(network, config),
        "norm_eps": float(torch.finfo(torch.float32).eps if eps is None else eps),
        "mlp": config.get("mlp", "relu"),
        "layer_bias": "blocks.0.feed_forward.down.bias" in has_bias,
        "attention_bias": ("all" if "blocks.0.attention.proj.bias" in has_bias else "qkv") if qkv_bias else "none",
        "bias": network.lm_head.bias is not None,
        "tie_embeddings": network.lm_head.weight is network.token_embedding.weight,
    }


def _dense_width(network, config: dict[str, Any]) -> int:
    """The dense feed-forward's hidden width: read off a dense layer, else (every layer
    has experts) the card's ``d_ff`` as the transformer defaults it."""
    for block in network.blocks:
        down = getattr(block.feed_forward, "down", None)
        if down is not None:
            return down.weight.shape[1]
    return config.get("d_ff") or 4 * network.token_embedding.weight.shape[1]


# The card's settings of experts (plugins/blocks/experts.py), which the dense layouts have no place for.
EXPERT_SETTINGS = ("experts", "experts_per_token", "expert_d_ff", "norm_topk_prob", "shared_expert_d_ff")


def expert_layers(config: Mapping[str, Any]) -> list[bool]:
    """Whether each layer has experts: its group's ``experts``, else the model-wide one."""
    pattern = [group for group in config.get("layers") or [] for _ in range(group.get("repeat", 1))] or [{}]
    layers = []
    for i in range(config["n_layer"]):
        value = pattern[i % len(pattern)].get("experts")
        layers.append(bool(config.get("experts") if value is None else value))
    return layers


def without_experts(config: dict[str, Any]) -> dict[str, Any]:
    """The config less its experts' settings (and its layer groups, where they set nothing else)."""
    plain = {key: value for key, value in config.items() if key not in EXPERT_SETTINGS}
    if all(set(group) <= {"experts", "repeat"} for group in config.get("layers") or []):
        plain.pop("layers", None)
    return plain
