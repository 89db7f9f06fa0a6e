"""OLMo 2 (AI2): Llama's tensors and arithmetic but for where the norms sit, on each
sublayer's output before the residual add (``norm_placement = "after"``: no input
norms), and a query/key RMSNorm over the whole projected width, every head at once
(``qk_norm = "rmsnorm-whole"``), before RoPE. transformers' ``Olmo2ForCausalLM``;
llama.cpp's ``olmo2`` keeps transformers' rotate_half rows (its NeoX-style RoPE)."""

from __future__ import annotations

import dataclasses
from typing import Any

from .llama import GGUF_KEYS, LLAMA, TENSORS, choose, fields, gguf_checks, settings
from .tensors import HFTensor

_LAYER = "model.layers.{i}"
# Llama's tensors without the input norms; transformers' post_attention_layernorm is the
# norm on the attention's output here, not the feed-forward's input.
_PRE_NORMS = ("ATTN_NORM", "FFN_NORM")
TENSORS_OLMO2 = (
    *(rule for rule in TENSORS if not set(rule.parts) & set(_PRE_NORMS)),
    HFTensor(f"{_LAYER}.post_attention_layernorm", ("ATTN_POST_NORM",)),
    HFTensor(f"{_LAYER}.post_feedforward_layernorm", ("FFN_POST_NORM",)),
    HFTensor(f"{_LAYER}.self_attn.q_norm", ("ATTN_Q_NORM",)),
    HFTensor(f"{_LAYER}.self_attn.k_norm", ("ATTN_K_NORM",)),
)
OWN = {"norm_placement": "after", "qk_norm": "rmsnorm-whole"}


def choose_olmo2(config: dict[str, Any]) -> tuple[str | None, str]:
    """OLMo 2 is a Llama with OWN's settings and no feed-forward biases."""
    if any(config.get(key) != value for key, value in OWN.items()):
        return None, "OLMo 2 normalises each sublayer's output and its queries and keys across all heads"
    chosen, reason = choose({key: value for key, value in config.items() if key not in OWN})
    if chosen != "llama" or config["layer_bias"]:
        return None, reason or f"OLMo 2's norms on a {chosen or 'Llama'} layout with feed-forward biases"
    return "olmo2", ""


def _gguf_refusal(config: dict[str, Any]) -> str | None:
    if config["attention_bias"] != "none":
        return "sets attention_bias; llama.cpp's olmo2 has no biases"
    if config.get("rope_scaling"):
        return "sets rope_scaling; the GGUF export writes plain RoPE only"
    return None


OLMO2 = dataclasses.replace(
    LLAMA,
    name="olmo2",
    title="OLMo 2",
    hf_model_types=("olmo2",),
    hf_class="Olmo2ForCausalLM",
    tensors=TENSORS_OLMO2,
    settings=lambda hf: {**settings(hf), **OWN},
    fields=lambda config: {**fields(config), "attention_bias": config["attention_bias"] == "all"},
    gguf_architecture="olmo2",
    gguf_pairs=False,
    gguf_keys=GGUF_KEYS,
    gguf_checks=gguf_checks,
    chooses=choose_olmo2,
    refuses_gguf=_gguf_refusal,
)
