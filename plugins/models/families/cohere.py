"""Cohere (CohereForAI/c4ai-command-r-v01, aya-23): one LayerNorm without a bias
feeding the attention and a gated SiLU feed-forward side by side
("parallel-shared-norm"), no biases, tied embeddings, and the head's output
multiplied by ``logit_scale``.

Its RoPE pairs channels 2i and 2i + 1 (``repeat_interleave``, not ``cat``), as
the zoo's does, so its query and key rows are kept as they are (``hf_pairs``);
llama.cpp's ``command-r`` rotates the same pairs.
"""

from __future__ import annotations

from typing import Any

from zoo_core.errors import ZooError

from .checked import CheckedFamily, gguf_keys, refusing
from .layout import GATED_KINDS, HF_ACTIVATIONS, hf_activation, zoo_activation
from .llama import TENSORS as LLAMA_TENSORS
from .rope import rope_parameters, rope_settings
from .tensors import HFTensor

# Llama's names (model.layers.{i}.self_attn.q_proj, mlp.gate_proj, ...), without the second norm.
TENSORS = (
    *(rule for rule in LLAMA_TENSORS if rule.parts != ("FFN_NORM",)),
    HFTensor("model.layers.{i}.self_attn.q_norm", ("ATTN_Q_NORM",)),  # use_qk_norm
    HFTensor("model.layers.{i}.self_attn.k_norm", ("ATTN_K_NORM",)),
)


def settings(hf) -> dict[str, Any]:
    """The card's config of transformers' CohereConfig."""
    mlp = zoo_activation(hf.hidden_act, gated=True)
    if mlp is None:
        gates = " and ".join(names[0] for kind, names in HF_ACTIVATIONS.items() if kind in GATED_KINDS)
        raise ZooError(f"hidden_act '{hf.hidden_act}' has no zoo counterpart ({gates} map)")
    config = {
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
        "layer_bias": False,
        "layernorm_bias": False,
        "attention_bias": "all" if hf.attention_bias else "none",
        "bias": False,
        "tie_embeddings": bool(hf.tie_word_embeddings),
        **rope_settings(hf.rope_parameters),
    }
    if "rotary_fraction" in config:
        raise ZooError("partial_rotary_factor: Cohere's attention rotates every channel")
    if hf.use_qk_norm:  # a LayerNorm weight per head, (heads, head size)
        config["qk_norm"] = "layernorm-per-head"
    if float(hf.logit_scale) != 1.0:
        config["logit_scale"] = float(hf.logit_scale)
    return config


def fields(config: dict[str, Any]) -> dict[str, Any]:
    """CohereConfig's fields of a card's config (its defaults filled in)."""
    return {
        "hidden_size": config["d_model"],
        "num_hidden_layers": config["n_layer"],
        "num_attention_heads": config["n_head"],
        "num_key_value_heads": config["n_kv_head"],
        "intermediate_size": config["d_ff"],
        "layer_norm_eps": config["norm_eps"],
        "hidden_act": hf_activation(config["mlp"]),
        "attention_bias": config["attention_bias"] == "all",
        "logit_scale": float(config.get("logit_scale") or 1.0),
        "use_qk_norm": config.get("qk_norm") == "layernorm-per-head",
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
    ("layer_norm_eps", "Attention.LAYERNORM_EPS", "positive"),
    ("rope_theta", "Rope.FREQ_BASE", "positive", 10000.0),
    ("logit_scale", "LLM.LOGIT_SCALE", "positive", 1.0),
)


def gguf_checks(hf, metadata, path, key) -> None:
    """The fields llama.cpp's command-r keys do not hold as transformers' fields."""
    hf.rope_parameters = {"rope_type": "default", "rope_theta": hf.rope_theta}
    hf.hidden_act, hf.use_qk_norm, hf.attention_bias, hf.tie_word_embeddings = "silu", False, False, True


def gguf_settings(config: dict[str, Any], present: set[str]) -> dict[str, Any]:
    """Command R+'s query/key norms where the file has them."""
    return {**config, "qk_norm": "layernorm-per-head"} if "ATTN_Q_NORM.weight" in present else config


COHERE = CheckedFamily(
    name="cohere",
    title="Cohere",
    hf_model_types=("cohere",),
    hf_class="CohereForCausalLM",
    tensors=TENSORS,
    settings=settings,
    fields=fields,
    hf_pairs=True,
    gguf_architecture="command-r",
    gguf_keys=GGUF_KEYS,
    gguf_checks=gguf_checks,
    gguf_settings=gguf_settings,
    # transformers' GGUF loader reads no command-r file: the export is checked by reading it
    # back in the zoo, and the tests run it in llama.cpp itself, whose graph fixes what follows.
    refuses_gguf=refusing(
        (lambda c: not c["tie_embeddings"], "has a head of its own; llama.cpp's command-r reads the embedding"),
        (lambda c: c["attention_bias"] != "none", "has attention biases; llama.cpp's command-r reads none"),
        (
            lambda c: c.get("qk_norm") is not None and c["n_layer"] < 64,
            "has query/key norms; llama.cpp's command-r reads them only in models of 64 layers or more",
        ),
        (lambda c: c["mlp"] != "swiglu", "has another feed-forward than swiglu, llama.cpp's command-r's only one"),
    ),
)
