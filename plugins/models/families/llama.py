"""Llama's family: Llama, Mistral, Qwen2 and Qwen3, each a record written as its
difference from Llama (RMSNorm, a gated feed-forward, RoPE, no head bias).

llama.cpp runs ``llama`` files with adjacent-pair RoPE, so its converter stores
each head's query and key rows in pairs order (convert_hf_to_gguf's ``permute``;
transformers' GGUF loader undoes it, ``_reverse_permute_weights``); ``qwen2``
files keep transformers' rotate_half order (llama.cpp runs them NeoX-style).
Mistral goes out as llama.cpp's ``llama``, which has no key for a window.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping

from zoo_core.errors import ZooError, printable

from .base import Family, GGUFKey
from .layout import (
    GATED_KINDS,
    HF_ACTIVATIONS,
    expert_layers,
    hf_activation,
    unmapped_setting,
    without_experts,
    zoo_activation,
)
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
    HFTensor(f"{_LAYER}.mlp.gate_proj", ("FFN_GATE",)),
    HFTensor(f"{_LAYER}.mlp.up_proj", ("FFN_UP",)),
    HFTensor(f"{_LAYER}.mlp.down_proj", ("FFN_DOWN",)),
    HFTensor("model.norm", ("OUTPUT_NORM",)),
    HFTensor("lm_head", ("OUTPUT",)),
)
# The architecture's GGUF metadata: transformers' field, gguf.Keys' key, and what it may default to.
GGUF_KEYS = (
    GGUFKey("hidden_size", "LLM.EMBEDDING_LENGTH"),
    GGUFKey("num_hidden_layers", "LLM.BLOCK_COUNT"),
    GGUFKey("num_attention_heads", "Attention.HEAD_COUNT"),
    GGUFKey("num_key_value_heads", "Attention.HEAD_COUNT_KV", default=lambda read: read["num_attention_heads"]),
    GGUFKey(
        "head_dim",
        "Attention.KEY_LENGTH",
        default=lambda read: read["hidden_size"] // read["num_attention_heads"] or 1,
    ),
    GGUFKey("intermediate_size", "LLM.FEED_FORWARD_LENGTH"),
    GGUFKey("rms_norm_eps", "Attention.LAYERNORM_RMS_EPS", "positive"),
    GGUFKey("max_position_embeddings", "LLM.CONTEXT_LENGTH"),
    GGUFKey("rope_theta", "Rope.FREQ_BASE", "positive", default=10000.0),
)


def _sliding_window(hf) -> int | None:
    """The window every layer uses, None for full attention; a mix is refused."""
    types = set(getattr(hf, "layer_types", None) or [])
    if types == {"sliding_attention"} or (not types and getattr(hf, "sliding_window", None)):
        return int(hf.sliding_window)
    if len(types) > 1:
        raise ZooError("some layers attend within a sliding window and others fully; the zoo's layers are alike")
    return None


def settings(hf, attention_bias: str | None = None) -> dict[str, Any]:
    """The card's config of a Llama-family transformers config."""
    mlp = zoo_activation(hf.hidden_act, gated=True)
    if mlp is None:
        gates = ", ".join(names[0] for kind, names in HF_ACTIVATIONS.items() if kind in GATED_KINDS)
        raise ZooError(f"hidden_act '{hf.hidden_act}' has no zoo counterpart ({gates.replace(', ', ' and ')} map)")
    head_size = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
    config: dict[str, Any] = {
        "d_model": hf.hidden_size,
        "n_layer": hf.num_hidden_layers,
        "n_head": hf.num_attention_heads,
        "n_kv_head": hf.num_key_value_heads or hf.num_attention_heads,
        "d_ff": hf.intermediate_size,
        "dropout": 0.0,
        "positions": "rope",
        "norm": "rmsnorm",
        "norm_eps": float(hf.rms_norm_eps),
        "mlp": mlp,
        "layer_bias": bool(getattr(hf, "mlp_bias", False)),
        "attention_bias": attention_bias or ("all" if getattr(hf, "attention_bias", False) else "none"),
        "bias": False,
        "tie_embeddings": bool(hf.tie_word_embeddings),
        **rope_settings(hf.rope_parameters),
    }
    if head_size != hf.hidden_size // hf.num_attention_heads:
        config["head_size"] = head_size
    window = _sliding_window(hf)
    if window is not None:
        config["sliding_window"] = window
    return config


def fields(config: dict[str, Any]) -> dict[str, Any]:
    """transformers' config fields of a Llama-family card config (its defaults filled in)."""
    return {
        "hidden_size": config["d_model"],
        "num_hidden_layers": config["n_layer"],
        "num_attention_heads": config["n_head"],
        "num_key_value_heads": config["n_kv_head"],
        "head_dim": config["head_size"],
        "intermediate_size": config["d_ff"],
        "rms_norm_eps": config["norm_eps"],
        "hidden_act": hf_activation(config["mlp"]),
        "tie_word_embeddings": config["tie_embeddings"],
        "rope_parameters": rope_parameters(config),
    }


def gguf_checks(hf, metadata: Mapping[str, Any], path: Path, key) -> None:
    """What the file's numbers must agree on, and the fields its keys do not hold directly
    (``key("Rope.SCALING_TYPE")``: the architecture's key of that name in ``gguf.Keys``)."""
    if hf.num_attention_heads % hf.num_key_value_heads:
        raise ZooError(
            f"{path}: {hf.num_attention_heads} query heads do not share {hf.num_key_value_heads} key/value heads evenly"
        )
    for name, what in (
        ("Attention.VALUE_LENGTH", "keys and values of different widths; the zoo's heads have one head size"),
        ("Rope.DIMENSION_COUNT", "RoPE rotates part of each head; Llama's family rotates all of it"),
    ):
        value = metadata.get(key(name), hf.head_dim)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ZooError(f"{path}: {key(name)} is {printable(repr(value))}, not a whole number above 0")
        if value != hf.head_dim:
            raise ZooError(f"{path}: {what}")
    rope: dict[str, Any] = {"rope_theta": hf.rope_theta}
    scaling = metadata.get(key("Rope.SCALING_TYPE"), "none")
    if scaling == "linear":
        factor = metadata.get(key("Rope.SCALING_FACTOR"))
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor > 0:
            raise ZooError(f"{path}: {key('Rope.SCALING_FACTOR')} is {printable(repr(factor))}, not a number above 0")
        rope.update(rope_type="linear", factor=float(factor))
    elif scaling != "none":
        raise ZooError(f"{path}: RoPE scaling '{printable(str(scaling))}' (none and linear import)")
    hf.rope_parameters = rope
    hf.hidden_act = "silu"
    hf.tie_word_embeddings = False  # decided by whether the file has output.weight


def choose(config: dict[str, Any]) -> tuple[str | None, str]:
    """The family a RoPE variant's config (its defaults filled in) is written as,
    or None and why none fits."""
    if any(expert_layers(config)):
        return _choose_with_experts(config)
    if config["block"] != "pre-norm":
        return None, f"{config['block']} blocks; every RoPE family in transformers normalises before each sublayer"
    if unmapped_setting(config):
        return None, f"it sets {unmapped_setting(config)}, which none of the built-in families writes"
    if config.get("bias", True):
        return None, "Llama's layout has RoPE and RMSNorm, but no bias on its vocabulary head, which this variant has"
    if config.get("embedding_scale") not in (None, 1, 1.0) or config.get("logit_softcap") is not None:
        return None, "an embedding scale or logit soft-cap, which none of Llama, Mistral, Qwen and GPT-NeoX has"
    if config.get("logit_scale") not in (None, 1, 1.0):
        return None, "a logit scale, which none of Llama, Mistral, Qwen and GPT-NeoX has"
    if config["norm"] == "layernorm" and config["mlp"] not in GATED_KINDS:
        if config["mlp"] not in HF_ACTIVATIONS:
            return None, f"a {config['mlp']} feed-forward, which GPT-NeoX's hidden_act has no name for"
        if config["residual"] not in ("sequential", "parallel"):
            return None, f"a {config['residual']} residual; GPT-NeoX's parallel residual has two LayerNorms"
        if config["n_kv_head"] != config["n_head"] or config["head_size"] * config["n_head"] != config["d_model"]:
            return None, "grouped key/value heads or a head size of its own, which GPT-NeoX's attention has not"
        if config.get("qk_norm") or config.get("sliding_window") or config["attention_bias"] == "qkv":
            return None, "QK-norm, a sliding window or query/key/value-only biases, which GPT-NeoX has not"
        return "gpt_neox", ""
    if config["residual"] != "sequential":
        return (
            None,
            f"a {config['residual']} residual with {config['norm']}; GPT-NeoX's has LayerNorm and a plain feed-forward",
        )
    if config["norm"] != "rmsnorm" or config["mlp"] not in GATED_KINDS:
        return None, f"{config['norm']} and a {config['mlp']} feed-forward; Llama's family has RMSNorm and a gated one"
    if config.get("rotary_fraction", 1.0) != 1.0:
        return None, "partial rotary, which Llama's family does not have"
    if config.get("qk_norm"):
        if config["qk_norm"] != "rmsnorm" or config.get("sliding_window") or config["attention_bias"] == "qkv":
            return None, "QK-norm without learned scales, or with a window or query/key/value biases; Qwen3 has neither"
        return "qwen3", ""
    if config["attention_bias"] == "qkv":
        if config.get("sliding_window") or config["layer_bias"]:
            return None, "query/key/value biases with a window or feed-forward biases; Qwen2 has neither"
        return "qwen2", ""
    if config.get("sliding_window"):
        if config["attention_bias"] != "none" or config["layer_bias"]:
            return None, "a sliding window with biases; Mistral has none"
        return "mistral", ""
    return "llama", ""


def _choose_with_experts(config: dict[str, Any]) -> tuple[str | None, str]:
    """Mixtral or Qwen2-MoE (families/moe.py): the dense layout the config has without its
    experts, with the experts as one of them has them; or None and why neither fits."""
    base, reason = choose(without_experts(config))
    if base is None:
        return None, reason
    if base not in ("llama", "mistral", "qwen2"):
        return None, f"experts in a {base} layout; Mixtral and Qwen2-MoE are Llama's with experts"
    if config["attention_bias"] == "all" or config["layer_bias"]:
        return None, "experts with biases beyond query/key/value; Mixtral and Qwen2-MoE have none"
    if config.get("shared_expert_d_ff"):
        if config.get("sliding_window"):
            return None, "a shared expert with a sliding window; Qwen2-MoE's layers attend fully"
        return "qwen2_moe", ""
    if base == "qwen2" or not all(expert_layers(config)):
        return None, "experts without a shared expert, with query/key/value biases or dense layers; Mixtral has none"
    if config.get("norm_topk_prob") is False:
        return None, "experts whose k weights are not rescaled to sum to 1; Mixtral rescales them"
    return "mixtral", ""


def _gguf_refusal(config: dict[str, Any]) -> str | None:
    """What llama.cpp's llama and qwen2 graphs cannot run."""
    if config.get("sliding_window"):
        return "sets sliding_window; llama.cpp's llama architecture has no key for a window"
    if config["mlp"] != "swiglu":
        return f"has mlp '{config['mlp']}'; llama.cpp's llama and qwen2 gate with SiLU (swiglu)"
    if config.get("rope_scaling"):
        return "sets rope_scaling; the GGUF export writes plain RoPE only"
    return None


def _llama_gguf_refusal(config: dict[str, Any]) -> str | None:
    reason = _gguf_refusal(config)
    if reason is None and (config["attention_bias"] != "none" or config["layer_bias"]):
        return "sets attention_bias or layer_bias; GGUF export writes llama without biases"
    return reason


LLAMA = Family(
    name="llama",
    title="Llama",
    hf_model_types=("llama",),
    hf_class="LlamaForCausalLM",
    tensors=TENSORS,
    settings=settings,
    fields=lambda config: {
        **fields(config),
        "attention_bias": config["attention_bias"] == "all",
        "mlp_bias": config["layer_bias"],
    },
    gguf_architecture="llama",
    gguf_pairs=True,
    gguf_keys=GGUF_KEYS,
    gguf_checks=gguf_checks,
    chooses=choose,
    refuses_gguf=_llama_gguf_refusal,
)
MISTRAL = dataclasses.replace(
    LLAMA,
    name="mistral",
    title="Mistral",
    hf_model_types=("mistral",),
    hf_class="MistralForCausalLM",
    fields=lambda config: {**fields(config), "sliding_window": config.get("sliding_window")},
)
QWEN2 = dataclasses.replace(
    LLAMA,
    name="qwen2",
    title="Qwen2",
    hf_model_types=("qwen2",),
    hf_class="Qwen2ForCausalLM",
    settings=lambda hf: settings(hf, attention_bias="qkv"),  # Qwen2's q, k, v always have biases
    fields=fields,
    gguf_architecture="qwen2",
    gguf_pairs=False,
    refuses_gguf=_gguf_refusal,
)
QWEN3 = dataclasses.replace(
    LLAMA,
    name="qwen3",
    title="Qwen3",
    hf_model_types=("qwen3",),
    hf_class="Qwen3ForCausalLM",
    tensors=(
        *TENSORS,
        HFTensor(f"{_LAYER}.self_attn.q_norm", ("ATTN_Q_NORM",)),
        HFTensor(f"{_LAYER}.self_attn.k_norm", ("ATTN_K_NORM",)),
    ),
    settings=lambda hf: {**settings(hf), "qk_norm": "rmsnorm"},
    fields=lambda config: {**fields(config), "attention_bias": config["attention_bias"] == "all"},
    gguf_architecture=None,
    gguf_keys=(),
    gguf_checks=None,
    refuses_gguf=None,
)
