"""StableLM (stabilityai/stablelm-2-1_6b, stablelm-3b-4e1t): a gated SiLU feed-forward
and partial RoPE like Llama's, but LayerNorm with biases while the linear layers
have none (query/key/value biases optional), and optionally one norm feeding
the attention and the feed-forward side by side ("parallel-shared-norm").

llama.cpp's ``stablelm`` names the same tensors as ``llama`` and rotates
NeoX-style, so rows stay in transformers' order.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from zoo_core.errors import ZooError

from .checked import CHECKED_BY_TRANSFORMERS, CheckedFamily, gguf_keys, refusing, rope_from_metadata, rotary_refusal
from .layout import GATED_KINDS, HF_ACTIVATIONS, hf_activation, zoo_activation
from .llama import TENSORS as LLAMA_TENSORS
from .rope import rope_parameters, rope_settings
from .tensors import HFTensor

# Llama's names (model.layers.{i}.self_attn.q_proj, mlp.gate_proj, ...), and qk_layernorm's weights, one
# LayerNorm per head in the files (q_layernorm.norms.{h}.weight), stacked as (heads, head size) on the way in.
TENSORS = (
    *LLAMA_TENSORS,
    HFTensor("model.layers.{i}.self_attn.q_layernorm", ("ATTN_Q_NORM",)),
    HFTensor("model.layers.{i}.self_attn.k_layernorm", ("ATTN_K_NORM",)),
)
_PER_HEAD = re.compile(r"(model\.layers\.\d+\.self_attn\.[qk]_layernorm)\.norms\.(\d+)\.weight")


def settings(hf) -> dict[str, Any]:
    """The card's config of transformers' StableLmConfig."""
    mlp = zoo_activation(hf.hidden_act, gated=True)
    if mlp is None:
        gates = " and ".join(names[0] for kind, names in HF_ACTIVATIONS.items() if kind in GATED_KINDS)
        raise ZooError(f"hidden_act '{hf.hidden_act}' has no zoo counterpart ({gates} map)")
    rope = rope_settings(hf.rope_parameters)
    reason = rotary_refusal(hf.hidden_size // hf.num_attention_heads, rope.get("rotary_fraction", 1.0))
    if reason:
        raise ZooError(reason)
    return {
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
        "residual": "parallel-shared-norm" if hf.use_parallel_residual else "sequential",
        "layer_bias": False,
        "layernorm_bias": True,
        "attention_bias": "qkv" if hf.use_qkv_bias else "none",
        "bias": False,
        "tie_embeddings": bool(hf.tie_word_embeddings),
        **rope,
        **({"qk_norm": "layernorm-per-head"} if hf.qk_layernorm else {}),
    }


def fields(config: dict[str, Any]) -> dict[str, Any]:
    """StableLmConfig's fields of a card's config (its defaults filled in)."""
    return {
        "hidden_size": config["d_model"],
        "num_hidden_layers": config["n_layer"],
        "num_attention_heads": config["n_head"],
        "num_key_value_heads": config["n_kv_head"],
        "intermediate_size": config["d_ff"],
        "layer_norm_eps": config["norm_eps"],
        "hidden_act": hf_activation(config["mlp"]),
        "use_parallel_residual": config["residual"] != "sequential",
        "use_qkv_bias": config["attention_bias"] != "none",
        "tie_word_embeddings": config["tie_embeddings"],
        "rope_parameters": {"partial_rotary_factor": 1.0, **rope_parameters(config)},
        "qk_layernorm": config.get("qk_norm") == "layernorm-per-head",
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
)


def gguf_checks(hf, metadata, path, key) -> None:
    """The fields llama.cpp's stablelm keys do not hold (biases and the second norm: `gguf_settings`)."""
    rope_from_metadata(hf, metadata, path, key, hf.hidden_size // hf.num_attention_heads)
    hf.hidden_act, hf.qk_layernorm, hf.tie_word_embeddings = "silu", False, False
    hf.use_qkv_bias = hf.use_parallel_residual = False


def gguf_settings(config: dict[str, Any], present: set[str]) -> dict[str, Any]:
    """Query/key/value biases where the file has them; one norm feeding both sublayers where it has no ffn_norm."""
    return {
        **config,
        "attention_bias": "qkv" if "ATTN_Q.bias" in present else "none",
        "residual": "sequential" if "FFN_NORM.weight" in present else "parallel-shared-norm",
        **({"qk_norm": "layernorm-per-head"} if "ATTN_Q_NORM.weight" in present else {}),
    }


@dataclass(frozen=True)
class StableLmFamily(CheckedFamily):
    """StableLM's files keep one LayerNorm module per head for qk_layernorm: stacked as one
    (heads, head size) weight on the way in, one per head again on the way out."""

    def tensors_from_hf(self, config, tensors, path: Path):
        per_head: dict[str, dict[int, torch.Tensor]] = {}
        rest = {}
        for name, tensor in tensors.items():
            found = _PER_HEAD.fullmatch(name)
            if found:
                per_head.setdefault(found.group(1), {})[int(found.group(2))] = tensor
            else:
                rest[name] = tensor
        for module, by_head in per_head.items():
            if sorted(by_head) != list(range(len(by_head))):
                raise ZooError(f"{path}: {module} lacks the norm of one of its heads")
            rest[f"{module}.weight"] = torch.stack([by_head[h] for h in range(len(by_head))])
        return super().tensors_from_hf(config, rest, path)

    def to_hf(self, model):
        exported = super().to_hf(model)
        state = {}
        for name, tensor in exported.state.items():
            if name.endswith(("q_layernorm.weight", "k_layernorm.weight")) and tensor.dim() == 2:
                module = name.removesuffix(".weight")
                state.update({f"{module}.norms.{h}.weight": tensor[h].contiguous() for h in range(tensor.shape[0])})
            else:
                state[name] = tensor
        return dataclasses.replace(exported, state=state)


STABLELM = StableLmFamily(
    name="stablelm",
    title="StableLM",
    hf_model_types=("stablelm",),
    hf_class="StableLmForCausalLM",
    tensors=TENSORS,
    settings=settings,
    fields=fields,
    gguf_architecture="stablelm",
    gguf_keys=GGUF_KEYS,
    gguf_checks=gguf_checks,
    gguf_settings=gguf_settings,
    refuses_gguf=refusing(
        (lambda c: bool(c.get("qk_norm")), f"has qk_layernorm, which {CHECKED_BY_TRANSFORMERS} does not read"),
        (
            lambda c: c.get("rotary_fraction", 1.0) != 0.25 or c.get("rope_base", 10000.0) != 10000.0,
            f"rotates other than a quarter of each head with base 10000, and {CHECKED_BY_TRANSFORMERS} reads "
            "no other in a stablelm file",
        ),
    ),
)
