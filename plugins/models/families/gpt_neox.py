"""GPT-NeoX (Pythia): LayerNorm, a plain feed-forward, partial RoPE and, usually, a
parallel residual; its attention is one module holding each head's query, key
and value rows side by side."""

from __future__ import annotations

import math
from typing import Any

from zoo_core.errors import ZooError

from .base import Family
from .layout import hf_activation, plain_hf_names, zoo_activation
from .llama import choose
from .rope import rope_parameters, rope_settings
from .tensors import HFTensor

_LAYER = "gpt_neox.layers.{i}"


def settings(hf) -> dict[str, Any]:
    mlp = zoo_activation(hf.hidden_act, gated=False)
    if mlp is None:
        raise ZooError(f"hidden_act '{hf.hidden_act}' has no zoo counterpart ({', '.join(plain_hf_names())} map)")
    return {
        "d_model": hf.hidden_size,
        "n_layer": hf.num_hidden_layers,
        "n_head": hf.num_attention_heads,
        "d_ff": hf.intermediate_size,
        "dropout": 0.0,
        "positions": "rope",
        "norm": "layernorm",
        "norm_eps": float(hf.layer_norm_eps),
        "mlp": mlp,
        "residual": "parallel" if hf.use_parallel_residual else "sequential",
        "layer_bias": True,
        "attention_bias": "all" if hf.attention_bias else "none",
        "bias": False,
        "tie_embeddings": bool(hf.tie_word_embeddings),
        **_rotary(hf.hidden_size // hf.num_attention_heads, hf.rope_parameters),
    }


def _rotary(head_size: int, rope: dict[str, Any]) -> dict[str, Any]:
    """The zoo's RoPE settings of GPT-NeoX's, rotating what transformers rotates.

    transformers rotates int(head_size x partial_rotary_factor) = d channels with the
    frequencies base^(-2i/d), i < d/2 rounded up, each used twice (cos and sin are
    the frequencies concatenated with themselves), so an odd d rotates d + 1
    channels: 3 of a head of 12 are 2 pairs at base^0 and base^(-2/3). The zoo's
    RoPE over d + 1 channels computes base'^(-2i/(d + 1)), the same frequencies for
    base' = base^((d + 1)/d), which the card records."""
    settings = rope_settings(rope)
    factor = float(rope.get("partial_rotary_factor", 1.0))
    channels = int(head_size * factor)
    if channels == 0:
        raise ZooError(f"partial_rotary_factor {factor} rotates none of a head's {head_size} channels")
    rotated = channels + channels % 2
    if rotated > head_size:
        raise ZooError(
            f"partial_rotary_factor {factor} rotates all {head_size} channels of a head, an odd number: "
            "transformers' RoPE pairs them and cannot run it either"
        )
    if rotated != channels:
        settings["rope_base"] = settings["rope_base"] ** (rotated / channels)
    settings.pop("rotary_fraction", None)
    if rotated != head_size:
        settings["rotary_fraction"] = rotated / head_size
    return settings


def _rope_parameters(config: dict[str, Any]) -> dict[str, Any]:
    """transformers' rope_parameters, with a partial_rotary_factor whose int(head_size x factor)
    (transformers' count) is the zoo's round(head_size x rotary_fraction)."""
    rope = rope_parameters(config)
    if "partial_rotary_factor" in rope:
        head_size = config["d_model"] // config["n_head"]
        rotated = round(config["rotary_fraction"] * head_size)
        factor = rotated / head_size
        while int(head_size * factor) < rotated:  # 1/3 x 12 may come out just under 4
            factor = math.nextafter(factor, 1.0)
        rope["partial_rotary_factor"] = factor
    return rope


def fields(config: dict[str, Any]) -> dict[str, Any]:
    return {
        "hidden_size": config["d_model"],
        "num_hidden_layers": config["n_layer"],
        "num_attention_heads": config["n_head"],
        "intermediate_size": config["d_ff"],
        "layer_norm_eps": config["norm_eps"],
        "hidden_act": hf_activation(config["mlp"]),
        "use_parallel_residual": config["residual"] == "parallel",
        "attention_bias": config["attention_bias"] == "all",
        "tie_word_embeddings": config["tie_embeddings"],
        "rope_parameters": _rope_parameters(config),
    }


GPT_NEOX = Family(
    name="gpt_neox",
    title="GPTNeoX",
    hf_model_types=("gpt_neox",),
    hf_class="GPTNeoXForCausalLM",
    tensors=(
        HFTensor("gpt_neox.embed_in", ("TOKEN_EMBD",)),
        HFTensor(f"{_LAYER}.input_layernorm", ("ATTN_NORM",)),
        HFTensor(f"{_LAYER}.attention.query_key_value", ("ATTN_Q", "ATTN_K", "ATTN_V"), join="heads"),
        HFTensor(f"{_LAYER}.attention.dense", ("ATTN_OUT",)),
        HFTensor(f"{_LAYER}.post_attention_layernorm", ("FFN_NORM",)),
        HFTensor(f"{_LAYER}.mlp.dense_h_to_4h", ("FFN_UP",)),
        HFTensor(f"{_LAYER}.mlp.dense_4h_to_h", ("FFN_DOWN",)),
        HFTensor("gpt_neox.final_layer_norm", ("OUTPUT_NORM",)),
        HFTensor("lm_head", ("OUTPUT",)),
    ),
    settings=settings,
    fields=fields,
    file_names={"embed_out.": "lm_head."},  # every checkpoint's name; transformers 5 renames it as it loads
    chooses=choose,
)
