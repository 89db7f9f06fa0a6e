"""Falcon (tiiuae/falcon-7b, falcon-40b, falcon-11B): LayerNorm with biases, a plain
GELU feed-forward, RoPE, linear layers with or without biases (``bias``), and
three attention layouts in one ``query_key_value`` tensor: multi-query (every
query head, then the one key and value: falcon-7b), one key and value per head
side by side (neither flag), or ``new_decoder_architecture``'s groups (each
key/value head's query heads, then its key and its value: falcon-40b). All three
are groups of query heads followed by their key and value (`HFTensor` join
"groups"). Blocks: sequential (``parallel_attn`` false), one norm feeding the
attention and the feed-forward side by side (falcon-7b), or two norms,
``ln_attn`` and ``ln_mlp`` (``new_decoder_architecture``).

ALiBi variants (falcon-rw) are refused: the zoo's ALiBi is not Falcon's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from zoo_core.errors import ZooError

from .checked import CHECKED_BY_TRANSFORMERS, CheckedFamily, gguf_keys, held, refusing
from .layout import hf_activation, plain_hf_names, zoo_activation
from .rope import rope_parameters, rope_settings
from .tensors import HFTensor

_LAYER = "transformer.h.{i}"
_SHARED = (
    HFTensor("transformer.word_embeddings", ("TOKEN_EMBD",)),
    HFTensor(f"{_LAYER}.self_attention.query_key_value", ("ATTN_Q", "ATTN_K", "ATTN_V"), join="groups"),
    HFTensor(f"{_LAYER}.self_attention.dense", ("ATTN_OUT",)),
    HFTensor(f"{_LAYER}.mlp.dense_h_to_4h", ("FFN_UP",)),
    HFTensor(f"{_LAYER}.mlp.dense_4h_to_h", ("FFN_DOWN",)),
    HFTensor("transformer.ln_f", ("OUTPUT_NORM",)),
    HFTensor("lm_head", ("OUTPUT",)),
)
# The norms' names in each kind of block.
NORMS = {
    "sequential": (
        HFTensor(f"{_LAYER}.input_layernorm", ("ATTN_NORM",)),
        HFTensor(f"{_LAYER}.post_attention_layernorm", ("FFN_NORM",)),
    ),
    "parallel-shared-norm": (HFTensor(f"{_LAYER}.input_layernorm", ("ATTN_NORM",)),),
    "parallel": (HFTensor(f"{_LAYER}.ln_attn", ("ATTN_NORM",)), HFTensor(f"{_LAYER}.ln_mlp", ("FFN_NORM",))),
}


def settings(hf) -> dict[str, Any]:
    """The card's config of transformers' FalconConfig."""
    if hf.alibi:
        raise ZooError("alibi: Falcon's ALiBi attention has no zoo counterpart (its RoPE variants import)")
    mlp = zoo_activation(hf.activation, gated=False)
    if mlp is None:
        raise ZooError(f"activation '{hf.activation}' has no zoo counterpart ({', '.join(plain_hf_names())} map)")
    n_head = hf.num_attention_heads
    if hf.new_decoder_architecture:
        if not hf.parallel_attn:
            raise ZooError("new_decoder_architecture without parallel_attn: transformers' Falcon cannot run it")
        n_kv_head = hf.num_kv_heads
        residual = "parallel" if (hf.num_ln_in_parallel_attn or 2) == 2 else "parallel-shared-norm"
    else:
        if not hf.multi_query and hf.num_kv_heads != n_head:
            raise ZooError("num_kv_heads below num_attention_heads needs new_decoder_architecture or multi_query")
        n_kv_head = 1 if hf.multi_query else n_head
        residual = "parallel-shared-norm" if hf.parallel_attn else "sequential"
    config = {
        "d_model": hf.hidden_size,
        "n_layer": hf.num_hidden_layers,
        "n_head": n_head,
        "n_kv_head": n_kv_head,
        "d_ff": hf.ffn_hidden_size,
        "dropout": 0.0,
        "positions": "rope",
        "norm": "layernorm",
        "norm_eps": float(hf.layer_norm_epsilon),
        "mlp": mlp,
        "residual": residual,
        "layer_bias": bool(hf.bias),
        "layernorm_bias": True,
        "attention_bias": "all" if hf.bias else "none",
        "bias": False,
        "tie_embeddings": bool(hf.tie_word_embeddings),
        **rope_settings(hf.rope_parameters),
    }
    if "rotary_fraction" in config:
        raise ZooError("partial_rotary_factor: Falcon's attention rotates every channel")
    return config


def fields(config: dict[str, Any]) -> dict[str, Any]:
    """FalconConfig's fields of a card's config (its defaults filled in): the oldest
    layout that holds its heads and block."""
    n_head, n_kv_head, residual = config["n_head"], config["n_kv_head"], config["residual"]
    old = residual == "sequential" or (residual == "parallel-shared-norm" and n_kv_head in (1, n_head))
    return {
        "hidden_size": config["d_model"],
        "num_hidden_layers": config["n_layer"],
        "num_attention_heads": n_head,
        "num_kv_heads": n_kv_head,
        "new_decoder_architecture": not old,
        "multi_query": old and n_kv_head == 1 and n_head > 1,
        "parallel_attn": residual != "sequential",
        "num_ln_in_parallel_attn": None if old else (2 if residual == "parallel" else 1),
        "ffn_hidden_size": config["d_ff"],
        "layer_norm_epsilon": config["norm_eps"],
        "activation": hf_activation(config["mlp"]),
        "bias": config["layer_bias"],
        "alibi": False,
        "tie_word_embeddings": config["tie_embeddings"],
        "rope_parameters": rope_parameters(config),
    }


GGUF_KEYS = gguf_keys(
    ("hidden_size", "LLM.EMBEDDING_LENGTH"),
    ("num_hidden_layers", "LLM.BLOCK_COUNT"),
    ("num_attention_heads", "Attention.HEAD_COUNT"),
    ("num_kv_heads", "Attention.HEAD_COUNT_KV", "whole", 1),
    ("ffn_hidden_size", "LLM.FEED_FORWARD_LENGTH", "whole", lambda read: 4 * read["hidden_size"]),
    ("max_position_embeddings", "LLM.CONTEXT_LENGTH"),
    ("layer_norm_epsilon", "Attention.LAYERNORM_EPS", "positive"),
    ("rope_theta", "Rope.FREQ_BASE", "positive", 10000.0),
)


def gguf_checks(hf, metadata, path, key) -> None:
    """llama.cpp's falcon runs parallel blocks with RoPE; which norms and biases: `gguf_settings`."""
    hf.rope_parameters = {"rope_type": "default", "rope_theta": hf.rope_theta}
    hf.alibi, hf.activation, hf.bias, hf.tie_word_embeddings = False, "gelu", False, False
    hf.new_decoder_architecture = hf.parallel_attn = True
    hf.num_ln_in_parallel_attn = 2


def gguf_settings(config: dict[str, Any], present: set[str]) -> dict[str, Any]:
    """Two norms (falcon-40b's ln_attn and ln_mlp) where the file has attn_norm_2; biases where it has them."""
    biased = "ATTN_QKV.bias" in present
    residual = "parallel" if "ATTN_NORM_2.weight" in present else "parallel-shared-norm"
    return {**config, "residual": residual, "layer_bias": biased, "attention_bias": "all" if biased else "none"}


def _not_falcon_7b(config: dict[str, Any]) -> bool:
    return (
        config["n_kv_head"] != 1
        or config["residual"] != "parallel-shared-norm"
        or config["layer_bias"]
        or not config["tie_embeddings"]
        or config["norm_eps"] != 1e-5
        or config["d_ff"] != 4 * config["d_model"]  # transformers reads feed_forward_length as no Falcon field
    )


def _swap_norms(name: str) -> str:
    """llama.cpp's falcon-40b names: attn_norm_2 is the attention's norm (ln_attn), attn_norm the
    feed-forward's (ln_mlp); falcon-7b's one norm is attn_norm. The zoo's canonical names are swapped."""
    for one, other in ((".attn_norm.", ".attn_norm_2."), (".attn_norm_2.", ".attn_norm.")):
        if one in name:
            return name.replace(one, other)
    return name


@dataclass(frozen=True)
class FalconFamily(CheckedFamily):
    """Falcon's norms are named by its kind of block: an export writes that kind's names."""

    def tensors_from_gguf(self, config, tensors, dequantize, path):
        if any(".attn_norm_2." in name for name in tensors):
            tensors = {_swap_norms(name): tensor for name, tensor in tensors.items()}
        return super().tensors_from_gguf(config, tensors, dequantize, path)

    def to_gguf(self, model):
        exported = super().to_gguf(model)
        if any(".attn_norm_2." in name for name in exported.tensors):
            exported = dataclasses.replace(exported, tensors={_swap_norms(n): t for n, t in exported.tensors.items()})
        return exported

    def to_hf(self, model):
        residual = held(model)["residual"]  # refused, if Falcon cannot hold it, by CheckedFamily.to_hf
        return CheckedFamily.to_hf(dataclasses.replace(self, tensors=(*_SHARED, *NORMS[residual])), model)


FALCON = FalconFamily(
    name="falcon",
    title="Falcon",
    hf_model_types=("falcon",),
    hf_class="FalconForCausalLM",
    # An import reads every kind's names: a block has only its own.
    tensors=(*_SHARED, *NORMS["sequential"], *NORMS["parallel"]),
    settings=settings,
    fields=fields,
    gguf_architecture="falcon",
    gguf_keys=GGUF_KEYS,
    gguf_checks=gguf_checks,
    gguf_settings=gguf_settings,
    # llama.cpp's converter writes falcon's groups as [queries; keys; values]; a second norm is
    # attn_norm_2 (read as the feed-forward's once `_swap_norms` has put falcon-40b's names in order).
    gguf_joined=(("ATTN_QKV", ("ATTN_Q", "ATTN_K", "ATTN_V")), ("ATTN_NORM_2", ("FFN_NORM",))),
    refuses_gguf=refusing(
        (
            _not_falcon_7b,
            f"is not laid out as falcon-7b (one key/value head, one norm, no linear biases, a tied head, "
            f"epsilon 1e-5, d_ff 4 d_model), the only falcon file {CHECKED_BY_TRANSFORMERS} reads",
        ),
    ),
)
