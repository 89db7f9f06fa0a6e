"""GPT-NeoX (Pythia): LayerNorm, a plain feed-forward, partial RoPE and, usually, a
parallel residual; its attention is one module holding each head's query, key
and value rows side by side."""

from __future__ import annotations

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
        **rope_settings(hf.rope_parameters),
    }


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
        "rope_parameters": rope_parameters(config),
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
