"""IBM Granite (3.x): Llama with four multipliers, each an existing zoo setting.
transformers' ``GraniteForCausalLM``: the embeddings times ``embedding_multiplier``
(``embedding_scale``), the scores q.k times ``attention_multiplier`` instead of
head_size^-0.5 (``query_scale``, always set: 1.0 means no scaling at all), each
sublayer's output times ``residual_multiplier`` before the residual add
(``residual_scale``) and the logits divided by ``logits_scaling`` L
(``logit_scale`` 1/L). llama.cpp's ``granite`` stores Llama's pair-order rows
and the four as metadata."""

from __future__ import annotations

import dataclasses
from typing import Any

from .base import GGUFKey
from .llama import GGUF_KEYS, LLAMA, choose, fields, settings

# card setting -> transformers' field
MULTIPLIERS = {
    "embedding_scale": "embedding_multiplier",
    "query_scale": "attention_multiplier",
    "residual_scale": "residual_multiplier",
}


def granite_settings(hf) -> dict[str, Any]:
    config = settings(hf)
    for setting, field in MULTIPLIERS.items():
        value = float(getattr(hf, field))
        if value != 1.0 or setting == "query_scale":
            config[setting] = value
    if float(hf.logits_scaling) != 1.0:
        config["logit_scale"] = 1.0 / float(hf.logits_scaling)
    return config


def granite_fields(config: dict[str, Any]) -> dict[str, Any]:
    return {
        **fields(config),
        "attention_bias": config["attention_bias"] == "all",
        "mlp_bias": config["layer_bias"],
        "embedding_multiplier": config.get("embedding_scale") or 1.0,
        "attention_multiplier": config.get("query_scale") or config["head_size"] ** -0.5,
        "residual_multiplier": config.get("residual_scale") or 1.0,
        "logits_scaling": 1.0 / config["logit_scale"] if config.get("logit_scale") else 1.0,
    }


def choose_granite(config: dict[str, Any]) -> tuple[str | None, str]:
    """Granite is a Llama with multipliers."""
    chosen, reason = choose({key: value for key, value in config.items() if key not in (*MULTIPLIERS, "logit_scale")})
    if chosen != "llama":
        return None, reason or f"Granite's multipliers on a {chosen} layout"
    return "granite", ""


def llama_layout_gguf_refusal(config: dict[str, Any], architecture: str) -> str | None:
    """What llama.cpp's Llama-layout graphs (granite, smollm3) cannot run as the export writes them:
    a window, another gate than SiLU, scaled RoPE, biases (written unreordered)."""
    if config.get("sliding_window"):
        return f"sets sliding_window; llama.cpp's {architecture} has no key for a window"
    if config["mlp"] != "swiglu":
        return f"has mlp '{config['mlp']}'; llama.cpp's {architecture} gates with SiLU (swiglu)"
    if config.get("rope_scaling"):
        return "sets rope_scaling; the GGUF export writes plain RoPE only"
    if config["attention_bias"] != "none" or config["layer_bias"]:
        return f"sets attention_bias or layer_bias; the GGUF export writes {architecture} without biases"
    return None


GRANITE = dataclasses.replace(
    LLAMA,
    name="granite",
    title="Granite",
    hf_model_types=("granite",),
    hf_class="GraniteForCausalLM",
    settings=granite_settings,
    fields=granite_fields,
    gguf_architecture="granite",
    gguf_keys=(
        *GGUF_KEYS,
        GGUFKey("embedding_multiplier", "LLM.EMBEDDING_SCALE", "positive", default=1.0),
        # llama.cpp scales by head_size^-0.5 where the file has no attention.scale
        GGUFKey("attention_multiplier", "Attention.SCALE", "positive", default=lambda read: read["head_dim"] ** -0.5),
        GGUFKey("residual_multiplier", "LLM.RESIDUAL_SCALE", "positive", default=1.0),
        GGUFKey("logits_scaling", "LLM.LOGIT_SCALE", "positive", default=1.0),
    ),
    chooses=choose_granite,
    refuses_gguf=lambda config: llama_layout_gguf_refusal(config, "granite"),
)
